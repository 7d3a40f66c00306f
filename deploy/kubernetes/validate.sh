#!/usr/bin/env bash
# Validates the Kubernetes manifests offline, without a cluster: yamllint, each object against
# the Kubernetes OpenAPI schemas of the oldest and newest API versions we claim (kubernetes-
# validate, strict: unknown fields are errors), and check_manifests.py (the objects fit together
# and keep the cluster contract). Installs its tools from PyPI into a virtual environment under
# target/ the first time (override with SLUICE_K8S_VALIDATE_VENV).
#
#   deploy/kubernetes/validate.sh
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${SLUICE_K8S_VALIDATE_VENV:-$repo/target/k8s-validate-venv}"

if ! "$venv/bin/python" -c "import kubernetes_validate, yamllint, yaml" >/dev/null 2>&1; then
    echo "== k8s: installing kubernetes-validate and yamllint in $venv"
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq python3 python3-venv >/dev/null
    fi
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "kubernetes-validate==1.37.0" "yamllint==1.38.0"
fi

cd "$here"
manifests=()
for f in *.yaml; do
    [ "$f" = kustomization.yaml ] || manifests+=("$f")
done

echo "== k8s: yamllint"
"$venv/bin/yamllint" --strict -c .yamllint ./*.yaml

for version in 1.33.0 1.37.0; do
    echo "== k8s: schemas of Kubernetes $version"
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
done

echo "== k8s: cross-checks"
"$venv/bin/python" check_manifests.py
