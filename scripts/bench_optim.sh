#!/usr/bin/env bash
# The optimizer's cost (src/optim/README.md): `normlab bench` of the training step
# with AdamW, Muon (fp32 and bf16 Newton-Schulz) and NorMuon (bf16 NS) for the block matrices, and
# the PyTorch 2.x reference (scripts/bench_reference.py on the pinned pip torch) with AdamW and
# with torch.optim.Muon for the same matrices, on the tiny / small / medium benchmark shapes, in
# interleaved rounds. Prints, per shape, each side's fastest median step over the rounds, Muon's
# extra over AdamW (as a fraction of the AdamW step) and NormLab's Muon against PyTorch's
# (PyTorch's step / NormLab's: 1.20 = NormLab 1.2x faster), as a Markdown table.
#   scripts/bench_optim.sh [--shapes "tiny small medium"] [--steps N] [--rounds R]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --target normlab >&2
cd "$ROOT"
BIN="$NORMLAB_BUILD/normlab"
SHAPES="tiny small medium"; STEPS=8; ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --shapes) SHAPES="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if ! PYTHONPATH="$NORMLAB_TORCH_PIP_PREFIX" /usr/bin/python3 -c 'import torch; assert hasattr(torch.optim, "Muon")' 2>/dev/null; then
  echo "bench_optim: the PyTorch side needs the pip torch with torch.optim.Muon: scripts/setup.sh --pip-torch" >&2
  exit 1
fi
PT2=(env PYTHONPATH="$NORMLAB_TORCH_PIP_PREFIX" /usr/bin/python3 scripts/bench_reference.py --threads 2)
declare -A SIDE=(
  [normlab_adamw]=""
  [normlab_muon_fp32]="--set optim.type=muon --set optim.muon.ns_dtype=fp32"
  [normlab_muon_bf16]="--set optim.type=muon"
  [normlab_normuon_bf16]="--set optim.type=normuon"
  [pytorch_adamw]=""
  [pytorch_muon]="--set optim.type=muon"
)
ORDER="normlab_adamw normlab_muon_fp32 normlab_muon_bf16 normlab_normuon_bf16 pytorch_adamw pytorch_muon"
echo "$STEPS timed steps x $ROUNDS interleaved rounds, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F), commit $(git rev-parse --short HEAD)" >&2
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for shape in $SHAPES; do
  for r in $(seq "$ROUNDS"); do
    for side in $ORDER; do
      cfg="configs/bench/$shape.yaml"
      # shellcheck disable=SC2086
      if [ "${side%%_*}" = normlab ]; then
        json="$("$BIN" bench -c "$cfg" --steps "$STEPS" --warmup 3 --json ${SIDE[$side]} 2>/dev/null)"
      else
        json="$("${PT2[@]}" -c "$cfg" --steps "$STEPS" --warmup 3 --json ${SIDE[$side]} 2>/dev/null)"
      fi
      s="$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["median_step_s"])' <<< "$json")"
      echo "$shape $side $r $s" >> "$out"
      echo "  $shape round $r $side: median step $s s" >&2
    done
  done
done
python3 - "$out" <<'PY'
import sys, collections
best = collections.defaultdict(lambda: float("inf"))
shapes = []
for line in open(sys.argv[1]):
    shape, side, r, s = line.split()
    if shape not in shapes:
        shapes.append(shape)
    best[(shape, side)] = min(best[(shape, side)], float(s))
cols = ["normlab_adamw", "normlab_muon_fp32", "normlab_muon_bf16", "normlab_normuon_bf16", "pytorch_adamw", "pytorch_muon"]
print("| shape | " + " | ".join(c.replace("_", " ") + " (ms)" for c in cols) +
      " | NormLab Muon bf16 extra over AdamW | PyTorch Muon / NormLab Muon bf16 | PyTorch AdamW / NormLab AdamW |")
print("|---|" + "---:|" * (len(cols) + 3))
for s in shapes:
    b = {c: best[(s, c)] for c in cols}
    cells = ["%.1f" % (1e3 * b[c]) for c in cols]
    cells.append("%+.0f %%" % (100 * (b["normlab_muon_bf16"] / b["normlab_adamw"] - 1)))
    cells.append("%.2fx" % (b["pytorch_muon"] / b["normlab_muon_bf16"]))
    cells.append("%.2fx" % (b["pytorch_adamw"] / b["normlab_adamw"]))
    print("| %s | %s |" % (s, " | ".join(cells)))
PY
