#!/usr/bin/env bash
# scripts/plot.py on real NormLab output, headless: a tiny run and a tiny sweep directory must give
# the expected PNG files, each a complete PNG of a sane size. Run from the repository root (CTest
# does): tests/scripts/plot_test.sh NORMLAB_BIN
set -euo pipefail

BIN=${1:?usage: tests/scripts/plot_test.sh NORMLAB_BIN}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PLOT="$ROOT/scripts/plot.py"
export MPLBACKEND=Agg OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/normlab_plot_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"  # the config's data paths are relative to the repository root

fail() { echo "plot_test: FAIL: $*" >&2; exit 1; }

# A tiny real run: 2 blocks of width 32, 20 updates, every record with full diagnostics.
tiny_run() {  # OUT [--set k=v ...]
  local out=$1; shift
  "$BIN" train -c configs/default.yaml \
    --set model.d_model=32 --set model.n_heads=2 --set model.n_layers=2 --set model.d_ff=64 \
    --set model.ctx=32 --set train.batch_size=4 --set train.steps=20 --set train.log_every=2 \
    --set diag.every=2 --set eval.every=10 --set eval.max_windows=4 --set optim.warmup=5 \
    "$@" --out "$out" >"$TMP/train.out" 2>"$TMP/train.log" || { cat "$TMP/train.log" >&2; fail "normlab train $out"; }
}

# PNG check: signature, IHDR, IEND at the end, at least MIN bytes, under 200 KB, 300..1400 px wide.
check_pngs() {  # DIR MIN_BYTES NAME...
  local dir=$1 min=$2; shift 2
  python3 - "$dir" "$min" "$@" <<'PY' || fail "PNG check in $1"
import os, struct, sys
d, mn, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
bad = []
for n in names:
    p = os.path.join(d, n)
    if not os.path.isfile(p):
        bad.append("%s: missing" % p); continue
    b = open(p, "rb").read()
    if b[:8] != b"\x89PNG\r\n\x1a\n" or b[12:16] != b"IHDR" or b[-8:-4] != b"IEND":
        bad.append("%s: not a complete PNG" % p); continue
    w, h = struct.unpack(">II", b[16:24])
    if not (mn <= len(b) <= 200 * 1024) or not (300 <= w <= 1400 and 200 <= h <= 1400):
        bad.append("%s: %d bytes, %dx%d px" % (p, len(b), w, h)); continue
    print("  ok %s (%d KB, %dx%d)" % (n, len(b) // 1024, w, h))
for x in bad:
    print("plot_test: " + x, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

RUN_PNGS="loss.png grad_heatmap.png grad_profile.png layers.png"

echo "== a run"
tiny_run "$TMP/run"
"$PLOT" "$TMP/run" >"$TMP/run_plot.out" || fail "plot.py on a run"
cat "$TMP/run_plot.out"
check_pngs "$TMP/run/plots" 8000 $RUN_PNGS
for f in $RUN_PNGS; do grep -q "/$f\$" "$TMP/run_plot.out" || fail "plot.py did not print $f"; done

echo "== a run still being written, with a non-finite step (--out elsewhere)"
cp -r "$TMP/run" "$TMP/partial"
printf '%s\n' '{"kind":"train","step":20,"loss":null,"grad_norm":null,"skipped":true,"nonfinite":true}' \
  >>"$TMP/partial/metrics.jsonl"
printf '%s' '{"kind":"train","step":22,"loss":3.1,"layers":{"grad_no' >>"$TMP/partial/metrics.jsonl"
"$PLOT" "$TMP/partial" --out "$TMP/partial_plots" >/dev/null || fail "plot.py on a truncated metrics.jsonl"
check_pngs "$TMP/partial_plots" 8000 $RUN_PNGS

echo "== a sweep"
SWEEP="$TMP/sweep"
# ---------------------------------------------------------------------------------------------
# SWEEP: hand-built sweep directory (layout of notes/SWEEP_FORMAT.md) until `normlab sweep`
# exists. Replace this block with
#     "$BIN" sweep -c <tiny sweep file> ...   (axes optim.lr x model.n_layers, one seed)
# and keep the plot.py call and the checks below.
mkdir -p "$SWEEP/runs"
for lr in 1.0e-3 3.0e-3; do
  for nl in 1 2; do
    name="lr=$lr,n_layers=$nl,seed=1337"
    tiny_run "$SWEEP/runs/$name" --set optim.lr=$lr --set model.n_layers=$nl
    printf '{"name":"%s","overrides":{"optim.lr":%s,"model.n_layers":%s},"seed":1337,"status":"done","exit_code":0,"wall_s":1.0}\n' \
      "$name" "$lr" "$nl" >"$SWEEP/runs/$name/point.json"
  done
done
python3 - "$SWEEP" <<'PY'
import csv, json, math, os, sys
sweep = sys.argv[1]
cols = ["row", "name", "optim.lr", "model.n_layers", "seed", "n", "status", "steps", "final_train_loss",
        "best_val_loss", "best_val_excess", "diverged", "spikes", "max_grad_norm", "grad_ratio_first_last",
        "tok_per_s", "wall_s"]
rows = []
for name in sorted(os.listdir(os.path.join(sweep, "runs"))):
    d = os.path.join(sweep, "runs", name)
    pj = json.load(open(os.path.join(d, "point.json")))
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    tr = [r for r in recs if r["kind"] == "train"]
    ev = [r for r in recs if r["kind"] == "eval"]
    g = tr[0]["layers"]["grad_norm"]
    rows.append({"row": "run", "name": name, "optim.lr": name.split(",")[0].split("=")[1],
                 "model.n_layers": pj["overrides"]["model.n_layers"], "seed": 1337, "n": 1, "status": "done",
                 "steps": tr[-1]["step"] + 1, "final_train_loss": tr[-1]["loss"],
                 "best_val_loss": min(r["val_loss"] for r in ev), "best_val_excess": min(r["val_excess"] for r in ev),
                 "diverged": int(tr[-1]["loss"] >= tr[0]["loss"]), "spikes": 0,
                 "max_grad_norm": max(r["grad_norm"] for r in tr), "grad_ratio_first_last": g[0] / g[-1],
                 "tok_per_s": sorted(r["tok_per_s"] for r in tr)[len(tr) // 2], "wall_s": pj["wall_s"]})
with open(os.path.join(sweep, "summary.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, cols)
    w.writeheader()
    w.writerows(rows)
    for r in rows:  # one seed: mean = the run, std = 0
        w.writerow(dict(r, row="mean", seed="", status="1/1 done"))
        w.writerow({k: (0 if isinstance(v, float) else v) for k, v in dict(r, row="std", seed="", status="1/1 done").items()})
PY
# ---------------------------------------------------------------------------------------------
"$PLOT" "$SWEEP" --group-by lr >"$TMP/sweep_plot.out" || fail "plot.py on a sweep"
cat "$TMP/sweep_plot.out"
check_pngs "$SWEEP/plots" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png

echo "== a sweep without summary.csv (runs/*/point.json only), with --runs"
rm "$SWEEP/summary.csv"
"$PLOT" "$SWEEP" --runs --out "$TMP/sweep_plots2" >/dev/null || fail "plot.py on a sweep without summary.csv"
check_pngs "$TMP/sweep_plots2" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png
check_pngs "$TMP/sweep_plots2/runs/lr=1.0e-3,n_layers=2,seed=1337" 8000 $RUN_PNGS

echo "plot_test: OK"
