#!/usr/bin/env bash
# scripts/plot.py on real NormLab output, headless: a tiny run and a tiny sweep directory must give
# the expected PNG files, each a complete PNG of a sane size. Then synthetic directories
# (tests/scripts/plot_fixtures.py) with the newer diagnostics (block_cos, act_max, attn_sink,
# grad_noise_scale, qk_clipped, eff_rank, spike z) and without them: the plots of those series exist
# exactly when the series do, and a categorical sweep (layout x norm type, 2 seeds) gets its
# comparison plots. Run from the repository root (CTest does): tests/scripts/plot_test.sh NORMLAB_BIN
set -euo pipefail

BIN=${1:?usage: tests/scripts/plot_test.sh NORMLAB_BIN}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PLOT="$ROOT/scripts/plot.py"
export MPLBACKEND=Agg OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export NORMLAB_BINARY="$BIN"  # plot.py takes every derived number from `normlab report --json`
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
# A real `normlab sweep`: learning rate x depth, one seed, the tiny model of tiny_run.
cat >"$TMP/sweep.yaml" <<YAML
base: $ROOT/configs/default.yaml
out_dir: $SWEEP
set:
  model.d_model: 32
  model.n_heads: 2
  model.d_ff: 64
  model.ctx: 32
  train.batch_size: 4
  train.steps: 20
  train.log_every: 2
  diag.every: 2
  eval.every: 10
  eval.max_windows: 4
  optim.warmup: 5
axes:
  optim.lr: [1.0e-3, 3.0e-3]
  model.n_layers: [1, 2]
seeds: [1337]
YAML
"$BIN" sweep -c "$TMP/sweep.yaml" --jobs 2 >"$TMP/sweep.out" 2>"$TMP/sweep.log" ||
  { cat "$TMP/sweep.log" >&2; fail "normlab sweep"; }
[ -f "$SWEEP/summary.csv" ] || fail "normlab sweep wrote no summary.csv"
"$PLOT" "$SWEEP" --group-by lr >"$TMP/sweep_plot.out" || fail "plot.py on a sweep"
cat "$TMP/sweep_plot.out"
check_pngs "$SWEEP/plots" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png

echo "== a sweep without summary.csv (runs/*/point.json only), with --runs"
rm "$SWEEP/summary.csv"
"$PLOT" "$SWEEP" --runs --out "$TMP/sweep_plots2" >/dev/null || fail "plot.py on a sweep without summary.csv"
check_pngs "$TMP/sweep_plots2" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png
check_pngs "$TMP/sweep_plots2/runs/lr=1.0e-3,n_layers=2,seed=1337" 8000 $RUN_PNGS

echo "== synthetic directories with the newer diagnostics, and without them (tests/scripts/plot_fixtures.py)"
FX="$TMP/fx"
/usr/bin/python3 "$ROOT/tests/scripts/plot_fixtures.py" "$FX" || fail "plot_fixtures.py"
NEW_RUN_PNGS="act_max.png attn_sink.png block_cos.png eff_rank.png grad_noise_scale.png qk_clip.png"
CAT_PNGS="best_val_compare.png grad_profile_step0.png block_cos_profile.png"
absent() {  # DIR NAME...: none of the files may exist (a plot of an absent series is an empty figure)
  local dir=$1; shift
  for f in "$@"; do [ ! -e "$dir/$f" ] || fail "$dir/$f written although its series is absent"; done
}
plot_quiet() {  # LOG ARGS...: plot.py must succeed and print no Python traceback or warning
  local log=$1; shift
  "$PLOT" "$@" >"$log.out" 2>"$log.err" || { cat "$log.err" >&2; fail "plot.py $*"; }
  if grep -qE "Traceback|Warning" "$log.err"; then cat "$log.err" >&2; fail "plot.py $* warned"; fi
}

echo "-- a run with block_cos, act_max, attn_sink, grad_noise_scale, qk_clipped, eff_rank"
plot_quiet "$TMP/fx_new" "$FX/run_new"
check_pngs "$FX/run_new/plots" 8000 $RUN_PNGS $NEW_RUN_PNGS
for f in $NEW_RUN_PNGS; do grep -q "/$f\$" "$TMP/fx_new.out" || fail "plot.py did not print $f"; done

echo "-- the same run without them (an older binary's output)"
plot_quiet "$TMP/fx_old" "$FX/run_old"
check_pngs "$FX/run_old/plots" 8000 $RUN_PNGS
absent "$FX/run_old/plots" $NEW_RUN_PNGS

echo "-- a categorical sweep: layout x norm.type, 2 seeds, summary.csv with a spike_score column"
plot_quiet "$TMP/fx_cat" "$FX/sweep_cat"
check_pngs "$FX/sweep_cat/plots" 8000 loss_curves.png $CAT_PNGS
absent "$FX/sweep_cat/plots" final_vs_lr.png final_vs_depth.png
# spike_score is a metric column of summary.csv, not an axis
/usr/bin/python3 - "$ROOT/scripts" "$FX/sweep_cat" <<'PY' || fail "axes of the categorical sweep"
import sys
sys.path.insert(0, sys.argv[1])
import plot
s = plot.Sweep(sys.argv[2])
assert s.axes == ["model.layout", "model.norm.type"], s.axes
assert plot.categorical_axes(s) == s.axes, plot.categorical_axes(s)
score = {p["name"]: p["spike_score"] for p in s.points}
assert all(0 <= v <= 1 for v in score.values()), score
assert score["layout=post,norm.type=layernorm,seed=1"] > 0, score  # the fixture's spike at step 120
PY
plot_quiet "$TMP/fx_cat2" "$FX/sweep_cat" --group-by type --out "$TMP/fx_cat2_plots"
check_pngs "$TMP/fx_cat2_plots" 8000 loss_curves.png $CAT_PNGS

echo "-- a one-axis categorical sweep of old-style runs, no summary.csv, with --runs"
plot_quiet "$TMP/fx_cat_old" "$FX/sweep_old" --runs
check_pngs "$FX/sweep_old/plots" 8000 loss_curves.png best_val_compare.png grad_profile_step0.png
absent "$FX/sweep_old/plots" block_cos_profile.png final_vs_lr.png final_vs_depth.png
check_pngs "$FX/sweep_old/plots/runs/norm.type=rmsnorm,seed=2" 8000 $RUN_PNGS

echo "-- the numeric sweep above (lr x depth) gets no categorical plots"
absent "$SWEEP/plots" $CAT_PNGS

echo "plot_test: OK"
