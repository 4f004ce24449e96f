#!/usr/bin/env bash
# Speed of NormLab against the same model in PyTorch (Python) on the same LibTorch, side by side:
#   scripts/bench.sh            the three reference workloads (configs/bench/{tiny,small,medium}.yaml),
#                               normlab and scripts/bench_reference.py interleaved, then the ratios
#   scripts/bench.sh --layouts  step time of 7 of the 12 layouts (pre, post, deepnorm, sandwich,
#                               normformer, reordered, mix) x {layernorm, rmsnorm} relative to
#                               pre/layernorm, on the tiny workload
# Options: --steps N (timed steps, default 20), --rounds R (interleaved repeats, default 3; the
# best round of each counts), --ref-blas-timeout N (run the PyTorch reference with
# OPENBLAS_THREAD_TIMEOUT=N, the OpenBLAS setting NormLab gives itself; by default the reference
# runs as a PyTorch user would, with OpenBLAS's default), --ref-openmp-blas (run the reference on
# the OpenMP build of OpenBLAS too, the one NormLab's binaries load; by default it gets the system's
# libblas alternative, the pthread build). Run it on an otherwise idle machine.
#   scripts/bench.sh --torch2   the four-way CPU comparison: NormLab built against Debian's LibTorch
#                               1.13 and against the pinned pip LibTorch 2.x (scripts/torch_env.sh),
#                               the reference on PyTorch 1.13 (Debian) and on PyTorch 2.x (pip) in
#                               three variants (eager, SDPA attention, torch.compile), all interleaved
#   scripts/bench.sh --bf16     bf16 on the CPU, all on the pinned pip LibTorch 2.x: NormLab fp32,
#                               NormLab train.precision bf16, and the reference under
#                               torch.autocast("cpu", bfloat16) in the three variants, interleaved;
#                               then the ratios and the fp32 / bf16 GEMM ceilings (1024^3 matmuls)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
unset NORMLAB_TORCH  # the main side is always Debian's LibTorch; --torch2 adds the pip one
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --bench-ref --target normlab  # the reference needs Debian's python3-torch
cd "$ROOT"
BIN="$NORMLAB_BUILD/normlab"
STEPS=20; ROUNDS=3; MODE=workloads; REF_ENV=()
while [ $# -gt 0 ]; do
  case "$1" in
    --layouts) MODE=layouts ;;
    --torch2) MODE=torch2 ;;
    --bf16) MODE=bf16 ;;
    --steps) STEPS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --ref-blas-timeout) REF_ENV+=("OPENBLAS_THREAD_TIMEOUT=$2"); shift ;;
    --ref-openmp-blas) REF_ENV+=("LD_LIBRARY_PATH=/usr/lib/$(gcc -print-multiarch)/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2

if [ "$MODE" = layouts ]; then
  for r in $(seq "$ROUNDS"); do
    for layout in pre post deepnorm sandwich normformer reordered mix; do
      for norm in layernorm rmsnorm; do
        "$BIN" bench -c configs/bench/tiny.yaml --steps "$STEPS" --json \
          --set model.layout=$layout --set model.norm.type=$norm 2>/dev/null \
          | sed "s/^{/{\"layout\":\"$layout\",\"norm\":\"$norm\",/" >> "$out/layouts.jsonl"
      done
    done
  done
  /usr/bin/python3 - "$out/layouts.jsonl" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    k = (r["layout"], r["norm"])
    best[k] = min(best.get(k, 1e9), r["median_step_s"])
base = best[("pre", "layernorm")]
print(f'{"layout":<12}{"norm":<11}{"step ms":>9}{"vs pre/layernorm":>18}')
for (l, n), t in best.items():
    print(f"{l:<12}{n:<11}{t*1e3:>9.2f}{t/base:>17.2f}x")
PY
  exit 0
fi

if [ "$MODE" = bf16 ]; then
  NORMLAB_TORCH=pip NORMLAB_BUILD_DIR= "$ROOT/scripts/setup.sh" --target normlab
  BIN2="$ROOT/build-pip/normlab"
  [ -z "${NORMLAB_BUILD_DIR:-}" ] || BIN2="$NORMLAB_BUILD_DIR-pip/normlab"
  PT2=(env PYTHONPATH="$NORMLAB_TORCH_PIP_PREFIX" /usr/bin/python3 scripts/bench_reference.py)
  for r in $(seq "$ROUNDS"); do
    for w in tiny small medium; do
      echo "round $r: $w" >&2
      cfg=configs/bench/$w.yaml
      for p in fp32 bf16; do
        "$BIN2" bench -c $cfg --steps "$STEPS" --set train.precision=$p --json 2>/dev/null \
          | sed "s/^{/{\"side\":\"normlab $p\",/" >> "$out/all.jsonl"
      done
      for v in eager sdpa compile; do
        "${PT2[@]}" -c $cfg --steps "$STEPS" --variant $v --precision bf16 --json 2>"$out/pt2.err" \
          | sed "s/^{/{\"side\":\"pytorch bf16 $v\",/" >> "$out/all.jsonl" \
          || { echo "pytorch bf16 $v failed on $w:" >&2; tail -3 "$out/pt2.err" >&2; }
      done
    done
  done
  /usr/bin/python3 - "$out/all.jsonl" "$NORMLAB_TORCH_PIP_VERSION" <<'PY'
import json, sys
best, peak = {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    k = (r["side"], r["config"].split("/")[-1].replace(".yaml", ""))
    if k not in best or r["tokens_per_s"] > best[k]["tokens_per_s"]:
        best[k] = r
    for key in ("gemm_peak_gflops", "gemm_peak_bf16_gflops"):
        if r.get(key):
            peak[key] = max(peak.get(key, 0), r[key])
W = ("tiny", "small", "medium")
sides = list(dict.fromkeys(s for s, _ in best))
print(f"PyTorch / LibTorch {sys.argv[2]} on the CPU; tokens/s, best round of each side")
print(f'{"side":<24}' + "".join(f"{w:>10}" for w in W))
for s in sides:
    print(f"{s:<24}" + "".join(f'{best[(s, w)]["tokens_per_s"]:>10.0f}' if (s, w) in best else f'{"-":>10}' for w in W))
def ratio(a, refs):
    row = []
    for w in W:
        vals = [best[(p, w)]["tokens_per_s"] for p in refs if (p, w) in best]
        row.append(f'{best[(a, w)]["tokens_per_s"] / max(vals):>9.2f}x' if vals and (a, w) in best else f'{"-":>10}')
    return "".join(row)
pt = [s for s in sides if s.startswith("pytorch")]
print(f'{"normlab bf16 / best pytorch bf16":<40}' + ratio("normlab bf16", pt))
print(f'{"normlab bf16 / normlab fp32":<40}' + ratio("normlab bf16", ["normlab fp32"]))
for key, name in (("gemm_peak_gflops", "fp32"), ("gemm_peak_bf16_gflops", "bf16")):
    if key in peak:
        print(f"GEMM ceiling {name}: {peak[key]:.0f} GFLOP/s (1024^3 matmul, normlab bench's own measurement)")
for w in W:
    r = best.get(("normlab bf16", w))
    if r:
        print(f'normlab bf16 {w}: {r["gflops"]:.0f} GFLOP/s achieved, {100 * r["gflops"] / peak.get("gemm_peak_bf16_gflops", float("nan")):.1f}% of the bf16 ceiling')
PY
  exit 0
fi

if [ "$MODE" = torch2 ]; then
  NORMLAB_TORCH=pip NORMLAB_BUILD_DIR= "$ROOT/scripts/setup.sh" --target normlab
  BIN2="$ROOT/build-pip/normlab"
  [ -z "${NORMLAB_BUILD_DIR:-}" ] || BIN2="$NORMLAB_BUILD_DIR-pip/normlab"
  PT2=(env PYTHONPATH="$NORMLAB_TORCH_PIP_PREFIX" /usr/bin/python3 scripts/bench_reference.py)
  for r in $(seq "$ROUNDS"); do
    for w in tiny small medium; do
      echo "round $r: $w" >&2
      cfg=configs/bench/$w.yaml
      "$BIN" bench -c $cfg --steps "$STEPS" --json 2>/dev/null | sed 's/^{/{"side":"normlab 1.13",/' >> "$out/all.jsonl"
      env "${REF_ENV[@]}" /usr/bin/python3 scripts/bench_reference.py -c $cfg --steps "$STEPS" --json 2>/dev/null \
        | sed 's/^{/{"side":"pytorch 1.13 eager",/' >> "$out/all.jsonl"
      "$BIN2" bench -c $cfg --steps "$STEPS" --json 2>/dev/null | sed "s/^{/{\"side\":\"normlab $NORMLAB_TORCH_PIP_VERSION\",/" >> "$out/all.jsonl"
      for v in eager sdpa compile; do
        "${PT2[@]}" -c $cfg --steps "$STEPS" --variant $v --json 2>"$out/pt2.err" \
          | sed "s/^{/{\"side\":\"pytorch $NORMLAB_TORCH_PIP_VERSION $v\",/" >> "$out/all.jsonl" \
          || { echo "pytorch $NORMLAB_TORCH_PIP_VERSION $v failed on $w:" >&2; tail -3 "$out/pt2.err" >&2; }
      done
    done
  done
  /usr/bin/python3 - "$out/all.jsonl" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    k = (r["side"], r["config"].split("/")[-1].replace(".yaml", ""))
    if k not in best or r["tokens_per_s"] > best[k]["tokens_per_s"]:
        best[k] = r
sides = list(dict.fromkeys(s for s, _ in best))
print("tokens/s, best round of each side")
print(f'{"side":<24}' + "".join(f"{w:>10}" for w in ("tiny", "small", "medium")))
for s in sides:
    print(f"{s:<24}" + "".join(f'{best[(s, w)]["tokens_per_s"]:>10.0f}' if (s, w) in best else f'{"-":>10}'
                              for w in ("tiny", "small", "medium")))
nl = [s for s in sides if s.startswith("normlab")]
pt2 = [s for s in sides if s.startswith("pytorch") and "1.13" not in s]
for s in nl:
    for ref in [x for x in sides if x.startswith("pytorch")]:
        row = []
        for w in ("tiny", "small", "medium"):
            if (s, w) in best and (ref, w) in best:
                row.append(f'{best[(s, w)]["tokens_per_s"] / best[(ref, w)]["tokens_per_s"]:>9.2f}x')
            else:
                row.append(f'{"-":>10}')
        print(f"{s + ' / ' + ref:<48}" + "".join(row))
for s in nl:
    row = []
    for w in ("tiny", "small", "medium"):
        refs = [best[(p, w)]["tokens_per_s"] for p in pt2 if (p, w) in best]
        row.append(f'{best[(s, w)]["tokens_per_s"] / max(refs):>9.2f}x' if refs and (s, w) in best else f'{"-":>10}')
    print(f"{s + ' / best pytorch 2.x':<48}" + "".join(row))
PY
  exit 0
fi

for r in $(seq "$ROUNDS"); do
  for w in tiny small medium; do
    echo "round $r: $w" >&2
    "$BIN" bench -c configs/bench/$w.yaml --steps "$STEPS" --json 2>/dev/null >> "$out/normlab.jsonl"
    env "${REF_ENV[@]}" /usr/bin/python3 scripts/bench_reference.py -c configs/bench/$w.yaml --steps "$STEPS" --json 2>/dev/null >> "$out/pytorch.jsonl"
  done
done
/usr/bin/python3 - "$out/normlab.jsonl" "$out/pytorch.jsonl" <<'PY'
import json, sys
def best(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        k = r["config"].split("/")[-1].replace(".yaml", "")
        if k not in out or r["tokens_per_s"] > out[k]["tokens_per_s"]:
            out[k] = r
    return out
a, b = best(sys.argv[1]), best(sys.argv[2])
print(f'{"workload":<9}{"normlab tok/s":>14}{"pytorch tok/s":>14}{"ratio":>8}'
      f'{"MFU nl":>8}{"MFU pt":>8}{"RSS nl":>8}{"RSS pt":>8}')
for k in ["tiny", "small", "medium"]:
    if k not in a or k not in b: continue
    x, y = a[k], b[k]
    ratio = x["tokens_per_s"] / y["tokens_per_s"]
    print(f'{k:<9}{x["tokens_per_s"]:>14.0f}{y["tokens_per_s"]:>14.0f}{ratio:>7.2f}x'
          f'{100*x["mfu"]:>7.1f}%{100*y["mfu"]:>7.1f}%{x["peak_rss_mib"]:>7.0f}M{y["peak_rss_mib"]:>7.0f}M')
t, u = next(iter(a.values())), next(iter(b.values()))
print(f'threads: normlab {t["threads"]}, pytorch {u["threads"]}; OpenBLAS: normlab {t.get("blas") or "?"}, '
      f'pytorch {u.get("blas_threading") or "?"}; GEMM peak {t["gemm_peak_gflops"]:.0f} GFLOP/s')
PY
