"""Cross-checks of the manifests that a schema cannot make (run by validate.sh).

A schema says each object is well formed; this says they fit together and keep the cluster
contract: every kustomization resource exists and every manifest but the Secret template is
listed; every ConfigMap and Secret key referenced exists; every $(VAR) in an argument is
defined; Services select a Deployment's pods and target its named ports; each role sets the
contract's variables and probes /healthz and /readyz on the health port; the job master's
service account may get, create and update Leases. Exits non-zero naming each problem.
"""

import pathlib
import re
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
TEMPLATES = {"secret.yaml"}
CONTRACT = {
    "jobmanager": {
        "SLUICE_MODE": "jobmanager",
        "SLUICE_RPC_ADDR": None,
        "SLUICE_HEALTH_ADDR": None,
        "SLUICE_SECRET": None,
        "SLUICE_ADVERTISED_HOST": None,
        "SLUICE_HA": "kubernetes",
        "SLUICE_LEASE_NAME": None,
        "POD_NAME": None,
        "POD_NAMESPACE": None,
    },
    "taskmanager": {
        "SLUICE_MODE": "taskmanager",
        "SLUICE_JOBMANAGER": "sluice-jobmanager:6123",
        "SLUICE_SLOTS": None,
        "SLUICE_RPC_ADDR": None,
        "SLUICE_DATA_ADDR": None,
        "SLUICE_HEALTH_ADDR": None,
        "SLUICE_SECRET": None,
        "SLUICE_ADVERTISED_HOST": None,
    },
}
PORTS = {"jobmanager": {"rpc": 6123, "health": 8081, "ui": 8082},
         "taskmanager": {"data": 6121, "health": 8081}}

problems = []


def problem(text):
    problems.append(text)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def main():
    kustomization = load(HERE / "kustomization.yaml")[0]
    listed = kustomization.get("resources", [])
    for name in listed:
        if not (HERE / name).is_file():
            problem(f"kustomization.yaml lists {name}, which does not exist")
    for path in sorted(HERE.glob("*.yaml")):
        if path.name not in listed and path.name not in TEMPLATES | {"kustomization.yaml"}:
            problem(f"{path.name} is not listed in kustomization.yaml")

    objects = [o for name in listed + sorted(TEMPLATES) for o in load(HERE / name)]
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    config = {name: set(o.get("data", {})) for name, o in by_kind.get("ConfigMap", {}).items()}
    secrets = {name: set(o.get("stringData", {})) | set(o.get("data", {}))
               for name, o in by_kind.get("Secret", {}).items()}
    accounts = set(by_kind.get("ServiceAccount", {}))

    for dname, deployment in by_kind.get("Deployment", {}).items():
        pod = deployment["spec"]["template"]
        labels = pod["metadata"].get("labels", {})
        selector = deployment["spec"]["selector"]["matchLabels"]
        if any(labels.get(k) != v for k, v in selector.items()):
            problem(f"{dname}: its selector {selector} does not match its pod labels")
        account = pod["spec"].get("serviceAccountName")
        if account and account not in accounts:
            problem(f"{dname}: service account {account} is not defined")
        role = labels.get("app.kubernetes.io/component")
        for c in pod["spec"]["containers"]:
            defined = {}
            for ref in c.get("envFrom", []):
                cm = ref.get("configMapRef", {}).get("name")
                if cm is not None:
                    if cm not in config:
                        problem(f"{dname}: envFrom ConfigMap {cm} is not defined")
                    defined.update({k: None for k in config.get(cm, ())})
            for e in c.get("env", []):
                defined[e["name"]] = e.get("value")
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    s, k = ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"]
                    if k not in secrets.get(s, ()):
                        problem(f"{dname}: {e['name']} reads key {k} of Secret {s}, not in its template")
                if "configMapKeyRef" in ref:
                    m, k = ref["configMapKeyRef"]["name"], ref["configMapKeyRef"]["key"]
                    if k not in config.get(m, ()):
                        problem(f"{dname}: {e['name']} reads key {k} of ConfigMap {m}, which lacks it")
            for arg in c.get("args", []) + c.get("command", []):
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
                    if var not in defined:
                        problem(f"{dname}: argument {arg!r} uses $({var}), which is not defined")
            for var, value in CONTRACT.get(role, {}).items():
                if var not in defined:
                    problem(f"{dname}: the cluster contract's {var} is not set")
                elif value is not None and defined[var] != value:
                    problem(f"{dname}: {var} is {defined[var]!r}, the contract wants {value!r}")
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for pname, number in PORTS.get(role, {}).items():
                if ports.get(pname) != number:
                    problem(f"{dname}: port {pname} should be {number}, is {ports.get(pname)}")
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = c.get(probe, {}).get("httpGet", {})
                if get.get("path") != path or get.get("port") not in ("health", 8081):
                    problem(f"{dname}: {probe} should GET {path} on the health port, has {get}")
            for need in ("requests", "limits"):
                if not c.get("resources", {}).get(need):
                    problem(f"{dname}: container {c['name']} has no resource {need}")

    for sname, service in by_kind.get("Service", {}).items():
        selector = service["spec"].get("selector", {})
        pods = [d["spec"]["template"] for d in by_kind.get("Deployment", {}).values()
                if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
                       for k, v in selector.items())]
        if not pods:
            problem(f"Service {sname}: its selector {selector} matches no Deployment")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort")
            names = {p.get("name") for pod in pods for c in pod["spec"]["containers"]
                     for p in c.get("ports", [])}
            if isinstance(target, str) and target not in names:
                problem(f"Service {sname}: targetPort {target} is no container port of its pods")

    rules = [r for role in by_kind.get("Role", {}).values() for r in role.get("rules", [])]
    lease_verbs = {v for r in rules if "coordination.k8s.io" in r.get("apiGroups", [])
                   and "leases" in r.get("resources", []) for v in r.get("verbs", [])}
    if not {"get", "create", "update"} <= lease_verbs:
        problem(f"no Role allows get, create and update on leases (has {sorted(lease_verbs)})")
    bound = {s["name"] for b in by_kind.get("RoleBinding", {}).values()
             for s in b.get("subjects", []) if s.get("kind") == "ServiceAccount"}
    if "sluice-jobmanager" not in bound:
        problem("the job master's service account is not bound to the leader-election Role")

    for p in problems:
        print(f"check_manifests: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check_manifests: {len(objects)} objects fit together and keep the cluster contract")


if __name__ == "__main__":
    main()
