#!/usr/bin/env bash
# sluice against Apache Flink on this machine: Flink's AsyncDataStream (AsyncBench.java) with the
# cases of `sluice-bench async-overhead` and `async-latency` at parallelism 1, and Flink's
# event-time windows (WindowBench.java: TumblingEventTimeWindows and SlidingEventTimeWindows with
# an AggregateFunction) with the cases of `sluice-bench window`, then the sluice benchmarks, then
# a side-by-side table (ratio sluice/Flink, higher is better for sluice). Then issue 14's end to
# end job (E2EBench.java beside `sluice-bench e2e-probe`: sequence -> async -> key_by -> tumbling
# window count -> discard, checkpoints every second, parallelism 1 and 2), one fresh process per
# run, the two engines' processes alternating: records/s, start-up time, peak RSS, CPU time and
# the ratios. Not part of CI.
#
#   crates/sluice-bench/flink/run_async_flink.sh [--quick] [--flink-only]
#       [--only async|window|e2e] [--e2e-records N] [--e2e-reps N]
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
e2e_records=
e2e_reps=
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --flink-only) flink_only=1 ;;
    --only) only=${2:-}; shift ;;
    --e2e-records) e2e_records=${2:-}; shift ;;
    --e2e-reps) e2e_reps=${2:-}; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
case $only in
  all|async|window|e2e) ;;
  *) echo "--only takes async, window or e2e, got '$only'" >&2; exit 2 ;;
esac

if [[ $quick == 1 ]]; then
  flink_args=(--records 2000000 --latency-records 9000 --reps 2)
  window_args=(--records 1000000 --reps 2)
  sluice_flags=(--quick)
  e2e_records=${e2e_records:-1000000}
  e2e_reps=${e2e_reps:-1}
else
  flink_args=(--records 20000000 --latency-records 18000 --reps 5)
  window_args=(--records 10000000 --reps 5)
  sluice_flags=()
  e2e_records=${e2e_records:-10000000}
  e2e_reps=${e2e_reps:-3}
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
javac --release 17 -cp "$lib/*" -d "$out/classes" "$here/AsyncBench.java" "$here/WindowBench.java" \
  "$here/E2EBench.java"
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

# The end-to-end job: each run its own process, sluice's and Flink's alternating.
if [[ $only == e2e || $only == all ]]; then
  cd "$root"
  [[ $flink_only == 1 ]] || cargo build --release -q -p sluice-bench
  : > "$out/e2e.jsonl"
  echo "... e2e: $e2e_records records, $e2e_reps process(es) per engine and parallelism," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for rep in $(seq 1 "$e2e_reps"); do
    for p in 1 2; do
      if [[ $flink_only == 0 ]]; then
        echo "... e2e run $rep, parallelism $p: sluice" >&2
        target/release/sluice-bench e2e-probe --records "$e2e_records" --parallelism "$p" \
          --launched-at-ns "$(date +%s%N)" | tail -n 1 | tee -a "$out/e2e.jsonl"
      fi
      echo "... e2e run $rep, parallelism $p: Flink" >&2
      java "${java_flags[@]}" -cp "$out/classes:$lib/*" E2EBench --records "$e2e_records" \
        --parallelism "$p" --launched-at-ns "$(date +%s%N)" 2>"$out/e2e-flink-p$p.log" \
        | tail -n 1 | tee -a "$out/e2e.jsonl"
    done
  done
  echo "... load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  python3 - "$out/e2e.jsonl" <<'EOF'
import json, statistics, sys

runs = {}
for r in map(json.loads, open(sys.argv[1])):
    runs.setdefault((r["parallelism"], r["system"]), []).append(r)

def med(rs, f):
    return statistics.median(f(r) for r in rs)

print(f"{'figure (median of runs)':<36} {'sluice':>10} {'Flink':>10} {'sluice/Flink':>13}")
for p in sorted({p for p, _ in runs}):
    s, f = runs.get((p, "sluice"), []), runs.get((p, "flink"), [])
    if not f:
        continue
    digests = {r["digest"] % 2**64 for r in s + f}
    if len(digests) > 1:
        print(f"parallelism {p}: the engines' window digests DIFFER: {sorted(digests)}")
    rows = [
        ("records/s", lambda r: r["records_per_s"], "{:.0f}"),
        ("start-up ms (launch -> 1st record)", lambda r: r["startup_ms"], "{:.0f}"),
        ("peak RSS MiB", lambda r: r["peak_rss_kib"] / 1024, "{:.0f}"),
        ("CPU s (user + system)", lambda r: r["cpu_s"], "{:.2f}"),
        ("checkpoints", lambda r: r["checkpoints"], "{:.0f}"),
    ]
    for name, fn, fmt in rows:
        label = f"p{p} {name}"
        fv = med(f, fn)
        if s:
            sv = med(s, fn)
            ratio = f"{sv / fv:>13.2f}" if fv else ""
            print(f"{label:<36} {fmt.format(sv):>10} {fmt.format(fv):>10} {ratio}")
        else:
            print(f"{label:<36} {'':>10} {fmt.format(fv):>10}")
EOF
  if [[ $only == e2e ]]; then exit 0; fi
fi

: > "$out/flink.jsonl"
if [[ $only == all || $only == async ]]; then
  java "${java_flags[@]}" -cp "$out/classes:$lib/*" AsyncBench "${flink_args[@]}" \
    | tee -a "$out/flink.jsonl"
fi
if [[ $only == all || $only == window ]]; then
  java "${java_flags[@]}" -cp "$out/classes:$lib/*" WindowBench "${window_args[@]}" \
    | tee -a "$out/flink.jsonl"
fi
[[ $flink_only == 1 ]] && exit 0

# 3. The same cases in sluice (parallelism 1 for the latency case), then side by side.
cd "$root"
: > "$out/sluice.jsonl"
if [[ $only == all || $only == async ]]; then
  cargo run --release -q -p sluice-bench -- async-overhead "${sluice_flags[@]}" --json \
    >> "$out/sluice.jsonl"
  cargo run --release -q -p sluice-bench -- async-latency --parallelism 1 "${sluice_flags[@]}" --json \
    >> "$out/sluice.jsonl"
fi
if [[ $only == all || $only == window ]]; then
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
