#!/usr/bin/env bash
# sluice against Apache Flink on this machine: Flink's AsyncDataStream (AsyncBench.java) with the
# cases of `sluice-bench async-overhead` and `async-latency` at parallelism 1, and Flink's
# event-time windows (WindowBench.java: TumblingEventTimeWindows and SlidingEventTimeWindows with
# an AggregateFunction) with the cases of `sluice-bench window`, then the sluice benchmarks, then
# a side-by-side table (ratio sluice/Flink, higher is better for sluice). Not part of CI.
#
#   crates/sluice-bench/flink/run_async_flink.sh [--quick] [--flink-only] [--only async|window]
#
# Needs Java 17 (javac, java) and Python 3 with pip access to PyPI the first time: it installs
# apache-flink==2.3.0 into target/flink-venv (set FLINK_VENV to use another venv) and takes the
# Flink jars from its pyflink/lib. Output goes to target/flink-bench/.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
venv=${FLINK_VENV:-$root/target/flink-venv}
out=$root/target/flink-bench
quick=0
flink_only=0
only=all
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --flink-only) flink_only=1 ;;
    --only) only=${2:-}; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
case $only in
  all|async|window) ;;
  *) echo "--only takes async or window, got '$only'" >&2; exit 2 ;;
esac

if [[ $quick == 1 ]]; then
  flink_args=(--records 2000000 --latency-records 9000 --reps 2)
  window_args=(--records 1000000 --reps 2)
  sluice_flags=(--quick)
else
  flink_args=(--records 20000000 --latency-records 18000 --reps 5)
  window_args=(--records 10000000 --reps 5)
  sluice_flags=()
fi

# 1. Flink's jars, from PyPI's apache-flink package.
if [[ ! -x $venv/bin/pip ]]; then
  python3 -m venv "$venv"
fi
installed=$("$venv/bin/pip" show apache-flink 2>/dev/null || true)
if ! grep -qx 'Version: 2.3.0' <<<"$installed"; then
  "$venv/bin/pip" install apache-flink==2.3.0
fi
lib=$(find "$venv" -type d -path '*/pyflink/lib' | head -n 1)
if [[ -z $lib || ! -f $lib/flink-dist-2.3.0.jar ]]; then
  echo "flink-dist-2.3.0.jar not found under $venv" >&2
  exit 1
fi

# 2. Compile and run the Flink job.
mkdir -p "$out/classes"
javac --release 17 -cp "$lib/*" -d "$out/classes" "$here/AsyncBench.java" "$here/WindowBench.java"
java_flags=(
  -Xmx2g
  --add-exports=java.base/sun.net.util=ALL-UNNAMED
  --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED
  --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
)
echo "... Flink 2.3.0 mini-cluster: $(java -version 2>&1 | head -n 1)" >&2
: > "$out/flink.jsonl"
if [[ $only != window ]]; then
  java "${java_flags[@]}" -cp "$out/classes:$lib/*" AsyncBench "${flink_args[@]}" \
    | tee -a "$out/flink.jsonl"
fi
if [[ $only != async ]]; then
  java "${java_flags[@]}" -cp "$out/classes:$lib/*" WindowBench "${window_args[@]}" \
    | tee -a "$out/flink.jsonl"
fi
[[ $flink_only == 1 ]] && exit 0

# 3. The same cases in sluice (parallelism 1 for the latency case), then side by side.
cd "$root"
: > "$out/sluice.jsonl"
if [[ $only != window ]]; then
  cargo run --release -q -p sluice-bench -- async-overhead "${sluice_flags[@]}" --json \
    >> "$out/sluice.jsonl"
  cargo run --release -q -p sluice-bench -- async-latency --parallelism 1 "${sluice_flags[@]}" --json \
    >> "$out/sluice.jsonl"
fi
if [[ $only != async ]]; then
  cargo run --release -q -p sluice-bench -- window "${sluice_flags[@]}" --json \
    >> "$out/sluice.jsonl"
fi

python3 - "$out/flink.jsonl" "$out/sluice.jsonl" <<'EOF'
import json, sys

flink = {(r["scenario"], r["case"]): r for r in map(json.loads, open(sys.argv[1]))}
sluice = {}
for r in map(json.loads, open(sys.argv[2])):
    sluice.setdefault((r["scenario"], r["case"]), {})[r["metric"]] = r

print(f"{'case':<44} {'sluice':>12} {'Flink':>12} {'sluice/Flink':>13}")
for key, f in flink.items():
    s = sluice.get(key)
    if s is None:
        continue
    name = f"{key[0]} {key[1]}"
    if "limit_fraction" in f:
        row = s["throughput_vs_limit"]
        print(f"{name + ' rec/s':<44} {row['value']:>12.0f} {f['value']:>12.0f} "
              f"{row['value'] / f['value']:>13.2f}")
        print(f"{name + ' fraction of limit':<44} {row['ratio']:>12.3f} "
              f"{f['limit_fraction']:>12.3f} {row['ratio'] / f['limit_fraction']:>13.2f}")
        w = sorted(row["detail"]["mean_latency_ms"])[len(row["detail"]["mean_latency_ms"]) // 2]
        print(f"{name + ' mean latency W (ms)':<44} {w:>12.2f} {f['mean_latency_ms']:>12.2f}")
    else:
        row = s["throughput"]
        print(f"{name + ' rec/s':<44} {row['value']:>12.0f} {f['value']:>12.0f} "
              f"{row['value'] / f['value']:>13.2f}")
EOF
