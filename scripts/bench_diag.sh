#!/usr/bin/env bash
# The cost of full diagnostics (src/metrics/README.md; `diag.every: 1`): `normlab bench` of a config
# with plain steps against the same with every step a full-diagnostics step (`bench --diag`:
# statistics captured in the forward, output-logit statistics, update ratio, the second host
# read). Interleaved rounds, so a slow spell of a shared machine hits both; prints each round's
# median step times and, at the end, the median over rounds of each side and the cost in percent,
# and the same for the fastest single step of each side (less exposed to a shared machine's noise).
#   scripts/bench_diag.sh [-c CONFIG] [--steps N] [--rounds R] [--set key=value ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --target normlab >&2
cd "$ROOT"
BIN="$NORMLAB_BUILD/normlab"
CONFIG=configs/default.yaml; STEPS=30; ROUNDS=5; SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -c|--config) CONFIG="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --set) SETS+=(--set "$2"); shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
echo "$CONFIG: $STEPS timed steps x $ROUNDS interleaved rounds, $(nproc) cores" >&2
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  for mode in plain diag; do
    flag=(); [ "$mode" = diag ] && flag=(--diag)
    line=$("$BIN" bench -c "$CONFIG" ${SETS[@]+"${SETS[@]}"} --steps "$STEPS" --warmup 5 --json "${flag[@]+"${flag[@]}"}")
    echo "$mode $line" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = {"plain": [], "diag": []}
mins = {"plain": [], "diag": []}
for line in open(sys.argv[1]):
    mode, rec = line.split(" ", 1)
    rec = json.loads(rec)
    runs[mode].append(rec["median_step_s"] * 1e3)
    mins[mode].append(rec["min_step_s"] * 1e3)
for mode, v in runs.items():
    print(f"{mode:6s} median step ms per round: " + " ".join(f"{x:.1f}" for x in v))
p, d = statistics.median(runs["plain"]), statistics.median(runs["diag"])
print(f"plain {p:.2f} ms, full diagnostics {d:.2f} ms: cost {100 * (d / p - 1):+.1f}% (median over rounds)")
p, d = min(mins["plain"]), min(mins["diag"])
print(f"fastest step: plain {p:.2f} ms, full diagnostics {d:.2f} ms: cost {100 * (d / p - 1):+.1f}%")
PY
