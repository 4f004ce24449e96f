#!/usr/bin/env bash
# Data-parallel speed on this machine (src/parallel/README.md): for the tiny and small reference
# workloads (configs/bench/), one process with batch B on all cores against `--nproc W` ranks of
# batch B/W on cores/W threads each: the same global batch, the same updates. Interleaved rounds;
# tokens/s is the median of the train records' tok_per_s after the first interval (eval excluded).
#   scripts/bench_dp.sh [--steps N] [--rounds R] [--nproc W] [--workloads "tiny small"]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --target normlab >&2
cd "$ROOT"
BIN="$NORMLAB_BUILD/normlab"
STEPS=60; ROUNDS=2; W=2; WORKLOADS="tiny small"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --nproc) W="$2"; shift ;;
    --workloads) WORKLOADS="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
CORES=$(nproc)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "machine: $CORES cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $STEPS steps, $ROUNDS rounds" >&2
tok_s() {  # median tok_per_s of a run's train records, the first interval left out
  python3 - "$1/metrics.jsonl" <<'EOF'
import json, statistics, sys
v = [r["tok_per_s"] for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train" and "tok_per_s" in r]
print(f"{statistics.median(v[1:] or v):.0f}")
EOF
}
printf "%-8s %8s %22s %26s %7s\n" workload batch "1 proc x $CORES thr tok/s" "$W ranks x $((CORES / W)) thr tok/s" ratio
for w in $WORKLOADS; do
  B=$(grep -E '^\s+batch_size:' "configs/bench/$w.yaml" | awk '{print $2}')
  common=(--set train.steps="$STEPS" --set train.log_every=10 --set diag.every=100000 --set eval.every=0
          --set eval.max_windows=1 --set train.checkpoint_every=100000)
  one=(); many=()
  for r in $(seq "$ROUNDS"); do
    rm -rf "$out/one" "$out/many"
    "$BIN" train -c "configs/bench/$w.yaml" "${common[@]}" --set train.threads="$CORES" --out "$out/one" 2>/dev/null
    one+=("$(tok_s "$out/one")")
    "$BIN" train -c "configs/bench/$w.yaml" "${common[@]}" --set train.batch_size=$((B / W)) --set train.threads=$((CORES / W > 0 ? CORES / W : 1)) \
      --nproc "$W" --out "$out/many" 2>/dev/null
    many+=("$(tok_s "$out/many")")
  done
  best_one=$(printf "%s\n" "${one[@]}" | sort -n | tail -1)
  best_many=$(printf "%s\n" "${many[@]}" | sort -n | tail -1)
  printf "%-8s %8s %22s %26s %7s\n" "$w" "$B" "$best_one (${one[*]})" "$best_many (${many[*]})" \
    "$(python3 -c "print(f'{$best_many / $best_one:.2f}')")"
done
