#!/usr/bin/env bash
# NormLab on CUDA against "the nanoGPT GPU recipe" (scripts/bench_gpu_reference.py: the same model,
# init and data in PyTorch with bf16 autocast, SDPA, torch.compile, fused AdamW, TF32), side by side.
# For each workload (configs/bench/{tiny,small,medium,gpt2s}.yaml) it runs
#   $BIN bench -c CFG --set train.device=cuda --set train.precision=$PREC --steps N --warmup W --json
#   $PY scripts/bench_gpu_reference.py -c CFG --device cuda --precision $PREC --variant V --steps N --warmup W --json
# interleaved (NormLab, recipe, NormLab, recipe, ... over workloads, for R rounds), keeps every JSON
# line in the output dir and prints a table of the BEST round of each side (highest tokens/s):
# tokens/s, ratio NormLab/recipe, MFU of each = gflops / the GEMM peak that run measured
# (8192^3 bf16 torch.mm for bf16 runs, fp32 with TF32 off for fp32 runs; the same denominator on
# both sides), peak GPU memory (max allocated over the timed steps) and the step-0 loss of each
# (the same model and data: they agree to bf16 rounding).
#   scripts/bench_gpu.sh [--precision bf16|fp32] [--steps N] [--warmup W] [--rounds R]
#                        [--workloads tiny,small,medium,gpt2s] [--variant compile|sdpa|eager]
#                        [--out DIR] [--timeout S]
#   scripts/bench_gpu.sh --table DIR     the table again from DIR's JSON lines (no runs; the
#                                        precision is the runs' own unless --precision is given)
# Defaults: bf16, 30 timed steps after 10 warm-up (they take torch.compile's compile time), 2 rounds,
# all four workloads, variant compile, out runs/bench_gpu/<timestamp>, each run killed after 900 s.
# Runs append to OUT/{normlab,recipe}.jsonl, so several calls with the same --out add up (e.g. one
# workload per call under a per-command time limit; then `--table OUT`). The recipe's first run of a
# workload pays torch.compile's compilation (warmup_s in its JSON; later ones hit inductor's cache).
# On the GPU machine (no network, no package manager): `scripts/gpu_build.sh` first (it builds
# build-gpu/normlab and writes build-gpu/env.sh, sourced here for LD_LIBRARY_PATH), then
# `scripts/bench_gpu.sh`. NORMLAB_BIN overrides the binary (default build-gpu/normlab; the env.sh
# beside it is sourced when there is one), NORMLAB_PYTHON the interpreter of the recipe (default
# python3: PyTorch 2.x with CUDA, numpy, PyYAML). Run it on an otherwise idle GPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${NORMLAB_BIN:-build-gpu/normlab}"
PY="${NORMLAB_PYTHON:-python3}"
PREC=bf16; STEPS=30; WARMUP=10; ROUNDS=2; WORKLOADS=tiny,small,medium,gpt2s; VARIANT=compile
OUT=""; TABLE_ONLY=""; TIMEOUT=900; PREC_GIVEN=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --precision) PREC="$2"; PREC_GIVEN="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --workloads) WORKLOADS="$2"; shift ;;
    --variant) VARIANT="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --timeout) TIMEOUT="$2"; shift ;;
    --table) TABLE_ONLY="$2"; shift ;;
    -h|--help) usage ;;
    *) echo "bench_gpu: unknown option $1" >&2; usage ;;
  esac
  shift
done
case "$PREC" in bf16|fp32) ;; *) echo "bench_gpu: --precision bf16|fp32, got $PREC" >&2; exit 2 ;; esac
case "$VARIANT" in compile|sdpa|eager) ;; *) echo "bench_gpu: --variant compile|sdpa|eager, got $VARIANT" >&2; exit 2 ;; esac
for n in "$STEPS" "$WARMUP" "$ROUNDS" "$TIMEOUT"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "bench_gpu: expected a number, got $n" >&2; exit 2; }
done
if [ "$STEPS" -lt 1 ] || [ "$ROUNDS" -lt 1 ]; then echo "bench_gpu: --steps and --rounds must be >= 1" >&2; exit 2; fi
IFS=, read -r -a WLS <<< "$WORKLOADS"

table() {  # table DIR [PREC]: the best round of each side per workload, from DIR/{normlab,recipe}.jsonl
  python3 - "$1" "$2" "$WORKLOADS" <<'PY'
import json, os, sys
d, prec, wls = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
if not prec:  # --table DIR: the precision of the runs there (the recipe's, else normlab's), else bf16
    for name in ("recipe", "normlab"):
        path = os.path.join(d, name + ".jsonl")
        if not prec and os.path.exists(path):
            for line in open(path):
                if line.startswith("{"):
                    prec = json.loads(line).get("precision", "")
                    break
    prec = prec or "bf16"

def load(name):
    best, runs = {}, {}
    path = os.path.join(d, name + ".jsonl")
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            w = r.get("workload") or os.path.basename(r["config"]).replace(".yaml", "")
            runs[w] = runs.get(w, 0) + 1
            if w not in best or r["tokens_per_s"] > best[w]["tokens_per_s"]:
                best[w] = r
    return best, runs

def mfu(r):
    """gflops / the GEMM peak of the benchmark's precision measured in the same process, the same
    denominator on both sides: bf16 -> the bf16 peak, fp32 -> the fp32 one (TF32 off)."""
    peak = r.get("gemm_peak_bf16_gflops", 0) if prec == "bf16" else r.get("gemm_peak_gflops", 0)
    return r["gflops"] / peak if peak else float("nan")

nl, nl_runs = load("normlab")
rc, rc_runs = load("recipe")
lines = []
out = lines.append
out("precision %s; best of the rounds of each side (highest tokens/s); MFU = gflops / the %s GEMM peak "
    "measured in the same run" % (prec, "bf16" if prec == "bf16" else "fp32 (TF32 off)"))
hdr = (f'{"workload":<9}{"normlab tok/s":>14}{"recipe tok/s":>14}{"ratio":>8}'
       f'{"MFU nl":>8}{"MFU rc":>8}{"mem nl":>9}{"mem rc":>9}{"loss0 nl":>10}{"loss0 rc":>10}{"runs":>6}')
out(hdr)
missing = False
for w in wls:
    a, b = nl.get(w), rc.get(w)
    na, nb = nl_runs.get(w, 0), rc_runs.get(w, 0)
    f = lambda r, k, fmt: format(r[k], fmt) if r is not None and k in r else "-"
    if a and b:
        rs = f'{a["tokens_per_s"] / b["tokens_per_s"]:.2f}x'
    else:
        missing = True
        rs = "-"
    m = lambda r: f"{100 * mfu(r):.1f}%" if r else "-"
    mem = lambda r: f'{r.get("peak_device_mib", 0):.0f}M' if r else "-"
    out(f'{w:<9}{f(a, "tokens_per_s", ".0f"):>14}{f(b, "tokens_per_s", ".0f"):>14}{rs:>8}'
        f'{m(a):>8}{m(b):>8}{mem(a):>9}{mem(b):>9}{f(a, "first_loss", ".4f"):>10}{f(b, "first_loss", ".4f"):>10}'
        f'{"%d/%d" % (na, nb):>6}')
any_r = next(iter(rc.values()), None)
any_n = next(iter(nl.values()), None)
if any_r or any_n:
    def peaks(r):
        return (f'fp32 {r.get("gemm_peak_gflops", 0) / 1e3:.1f}, bf16 {r.get("gemm_peak_bf16_gflops", 0) / 1e3:.1f} TFLOP/s'
                if r else "-")
    out(f"GEMM peaks (8192^3 torch.mm; first workload): normlab {peaks(any_n)}; recipe {peaks(any_r)}")
if any_r:
    out(f'recipe: PyTorch {any_r.get("torch", "?")}, variant {any_r.get("variant", "?")}, precision '
        f'{any_r.get("precision", "?")}, tf32 {any_r.get("tf32")}, fused AdamW {any_r.get("fused_adamw")}, '
        f'{any_r.get("gpu") or any_r.get("device")}')
for side, recs in (("normlab", nl), ("recipe", rc)):
    other = sorted({str(r.get("precision", "not reported")) for r in recs.values()} - {prec})
    if other:
        hint = " (does this binary take train.precision?)" if side == "normlab" else ""
        out(f'WARNING: {side} precision {", ".join(other)}, not {prec}{hint}')
if missing:
    out("(-: a side has no result for that workload; see the .err files)")
print("\n".join(lines))
PY
}

if [ -n "$TABLE_ONLY" ]; then
  table "$TABLE_ONLY" "$PREC_GIVEN"
  exit 0
fi

ENV_SH="$(dirname "$BIN")/env.sh"
# shellcheck disable=SC1090
[ -f "$ENV_SH" ] && source "$ENV_SH"
[ -x "$BIN" ] || { echo "bench_gpu: no normlab binary at $BIN (scripts/gpu_build.sh builds build-gpu/normlab; or set NORMLAB_BIN)" >&2; exit 2; }
for w in "${WLS[@]}"; do
  [ -f "configs/bench/$w.yaml" ] || { echo "bench_gpu: no configs/bench/$w.yaml" >&2; exit 2; }
done
OUT="${OUT:-runs/bench_gpu/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
  echo "bin: $BIN"; echo "python: $(command -v "$PY")"
  echo "args: precision=$PREC steps=$STEPS warmup=$WARMUP rounds=$ROUNDS workloads=$WORKLOADS variant=$VARIANT"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
} > "$OUT/info.txt" 2>&1 || true
echo "bench_gpu: writing $OUT" >&2

# run SIDE W R CMD...: one run; its JSON line (tagged with workload and round) to OUT/SIDE.jsonl,
# stderr to OUT/SIDE_W_rR.err; a failed run is reported and skipped
run() {
  local side="$1" w="$2" r="$3"; shift 3
  local err="$OUT/${side}_${w}_r$r.err" rc=0
  timeout "$TIMEOUT" "$@" > "$OUT/.last" 2> "$err" || rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q '^{' "$OUT/.last"; then
    echo "bench_gpu: $side $w round $r failed (exit $rc):" >&2
    tail -5 "$err" >&2
    return 0
  fi
  grep '^{' "$OUT/.last" | sed "s/^{/{\"workload\":\"$w\",\"round\":$r,/" >> "$OUT/$side.jsonl"
}

for r in $(seq "$ROUNDS"); do
  for w in "${WLS[@]}"; do
    cfg="configs/bench/$w.yaml"
    echo "bench_gpu: round $r/$ROUNDS: $w" >&2
    run normlab "$w" "$r" "$BIN" bench -c "$cfg" --set train.device=cuda --set "train.precision=$PREC" \
      --steps "$STEPS" --warmup "$WARMUP" --json
    run recipe "$w" "$r" "$PY" scripts/bench_gpu_reference.py -c "$cfg" --device cuda --precision "$PREC" \
      --variant "$VARIANT" --steps "$STEPS" --warmup "$WARMUP" --json
  done
done
rm -f "$OUT/.last"
table "$OUT" "$PREC" | tee "$OUT/table.txt"
