#!/usr/bin/env bash
# The cost of each residual-stream method (src/model/README.md, "Residual streams"): `normlab
# bench` of the training step with add (the plain stream), hc and mhc (4 streams), attnres (full
# and in blocks of 2), the three value-residual modes, ngpt and resi_dual, on the tiny and small
# benchmark shapes. nGPT needs RoPE, SwiGLU and an untied head, so it is timed against add on that
# same base (add_rope_swiglu). Interleaved rounds, so a slow spell of a shared machine hits every
# method; prints, per shape, each method's fastest step over all rounds and its ratio to add's
# (step time / add's step time; 1.30 = 30 % slower) as a Markdown table. --ab adds, for the
# methods that use the fused stream loops (src/model/residual/stream_kernels.h), a row `<method>
# composed` timed in the same rounds with NORMLAB_COMPOSED_STREAMS=1 (the composed LibTorch ops
# the loops replaced): before and after on one machine in one run. --baseline BIN adds a row
# `<method> (baseline)` for every method, timed with another normlab binary (a build of an
# earlier commit) in the same rounds.
#   scripts/bench_residual.sh [--shapes "tiny small"] [--steps N] [--rounds R] [--methods "add hc"] [--ab]
#                             [--baseline BIN]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --target normlab >&2
cd "$ROOT"
BIN="$NORMLAB_BUILD/normlab"
SHAPES="tiny small"; STEPS=10; ROUNDS=3; METHODS=""; AB=0; BASELINE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --shapes) SHAPES="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --methods) METHODS="$2"; shift ;;
    --ab) AB=1 ;;
    --baseline) BASELINE="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
NGPT_BASE="--set model.pos=rope --set model.ffn=swiglu --set model.tie_embeddings=false"
declare -A METHOD=(
  [add]=""
  [hc]="--set model.residual.type=hc"
  [hc_static]="--set model.residual.type=hc --set model.residual.dynamic=false"
  [mhc]="--set model.residual.type=mhc"
  [attnres]="--set model.residual.type=attnres"
  [attnres_block2]="--set model.residual.type=attnres --set model.residual.attnres_block=2"
  [vres_fixed]="--set model.value_residual=fixed"
  [vres_scalar]="--set model.value_residual=scalar"
  [vres_token]="--set model.value_residual=token"
  [resi_dual]="--set model.layout=resi_dual"
  [add_rope_swiglu]="$NGPT_BASE"
  [ngpt]="$NGPT_BASE --set model.layout=ngpt --set optim.weight_decay=0"
)
ORDER="${METHODS:-add hc hc_static mhc attnres attnres_block2 vres_fixed vres_scalar vres_token resi_dual add_rope_swiglu ngpt}"
MAIN="$ORDER"
if [ "$AB" = 1 ]; then
  for m in $MAIN; do
    case "$m" in hc|hc_static|mhc|attnres|attnres_block2) ORDER="$ORDER ${m}_composed" ;; esac
  done
fi
if [ -n "$BASELINE" ]; then
  for m in $MAIN; do ORDER="$ORDER ${m}_baseline"; done
fi
echo "$STEPS timed steps x $ROUNDS interleaved rounds, $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD)" >&2
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for shape in $SHAPES; do
  for r in $(seq "$ROUNDS"); do
    for m in $ORDER; do
      base="${m%_composed}"
      composed=0; [ "$base" != "$m" ] && composed=1
      bin="$BIN"
      case "$m" in *_baseline) base="${m%_baseline}"; bin="$BASELINE" ;; esac
      # shellcheck disable=SC2086
      s="$(NORMLAB_COMPOSED_STREAMS=$composed "$bin" bench -c "configs/bench/$shape.yaml" --steps "$STEPS" --warmup 3 --json ${METHOD[$base]} 2>/dev/null |
            python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["min_step_s"])')"
      echo "$shape $m $r $s" >> "$out"
      echo "  $shape round $r $m: fastest step $s s" >&2
    done
  done
done
python3 - "$out" "$ORDER" <<'PY'
import sys, collections
best = collections.defaultdict(lambda: float("inf"))
shapes = []
for line in open(sys.argv[1]):
    shape, m, r, s = line.split()
    if shape not in shapes:
        shapes.append(shape)
    best[(shape, m)] = min(best[(shape, m)], float(s))
order = sys.argv[2].split()
print("| method | " + " | ".join("%s step (ms) | vs add" % s for s in shapes) + " |")
print("|---|" + "---:|---:|" * len(shapes))
for m in order:
    cells = []
    for s in shapes:
        ref = "add_rope_swiglu" if m.startswith("ngpt") else "add"
        base = best[(s, ref + "_baseline" if m.endswith("_baseline") else ref)]
        cells.append("%.1f | %.2fx" % (1e3 * best[(s, m)], best[(s, m)] / base))
    print("| %s | %s |" % (m.replace("_composed", " (composed)").replace("_baseline", " (baseline)"), " | ".join(cells)))
PY
