#!/usr/bin/env bash
# scripts/plot.py on real NormLab output, headless: a tiny run and a tiny sweep directory must give
# the expected PNG files, each a complete PNG of a sane size. Then synthetic directories
# (tests/scripts/plot_fixtures.py) with the newer diagnostics (block_cos, act_max, attn_sink,
# grad_noise_scale, qk_clipped, eff_rank, spike z) and without them: the plots of those series exist
# exactly when the series do, and a categorical sweep (layout x norm type, 2 seeds) gets its
# comparison plots. The fixtures hold records only: their derived numbers come from the real
# binary's `normlab report --json` (of a run, and of a sweep through its sweep.yaml).
#
# plot.py derives no number: every number it shows or places a line or marker at comes from
# `normlab report --json` or the sweep summary. Two checks hold it to that:
#   1. A static rule over scripts/plot.py and scripts/plotlib/*.py, on the Python syntax tree (so
#      comments and docstrings do not count):
#      - no call to a function that computes a statistic or a transcendental: log, log2, log10,
#        log1p, logaddexp, exp, exp2, expm1, sqrt, mean, nanmean, average, std, nanstd, var, nanvar,
#        median, nanmedian, percentile, nanpercentile, quantile, nanquantile, sum, nansum, fsum,
#        prod, nanprod, cumsum, stdev, pstdev, variance, pvariance, fmean, harmonic_mean -- whether
#        np.*, math.*, statistics.*, a method or the builtin -- except the uses ALLOWED lists (the
#        display smoothing of a loss curve; the top of loss.png's y axis);
#      - no math.* other than math.isfinite; no import of statistics, scipy or pandas;
#      - no string "floor.json" in the code (the floors are the report's entropy_floor and
#        train_entropy_floor); no function named short_name or find_floor (the axes' short names
#        are the summary's).
#      The rule cannot see plain arithmetic (a ratio written a / b; layout uses it too), hence:
#   2. A behavioural check: the figures are drawn with a stand-in binary whose `report --json`
#      puts sentinel values in place of the derived numbers (entropy floors, uniform-attention
#      levels, ctx, the first/last-block ratio, final eff_rank, bits per byte; the sweep's mean and
#      std rows and its axes' short names; a tuned sweep's tune.arms[]: m(v), v*, l0, sensitivity,
#      delta, interval, p, verdict), and the figures (captured before saving) must show and
#      place exactly those. With those report values null and no sweep summary, the lines, labels
#      and means must be absent: plot.py has no fallback of its own. `plot.py --join` (the verdict
#      against size from several sweeps' summary.md tables) is drawn from sentinel tables: the
#      values printed, a later table's row replacing an earlier one's, an arm that learned nothing
#      off the axis.
# Run from the repository root (CTest does): tests/scripts/plot_test.sh NORMLAB_BIN
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

echo "== static rule: plot.py and scripts/plotlib compute no statistic, read no floor.json, name no axis"
/usr/bin/python3 - "$ROOT/scripts" <<'PY' || fail "plot.py or plotlib computes a number itself (the rule is at the top of tests/scripts/plot_test.sh)"
import ast, glob, os, sys
scripts = sys.argv[1]
files = [os.path.join(scripts, "plot.py")] + sorted(glob.glob(os.path.join(scripts, "plotlib", "*.py")))
assert len(files) >= 5, files  # plot.py, __init__, read, draw, run_figures, sweep_figures
FORBIDDEN = {"log", "log2", "log10", "log1p", "logaddexp", "exp", "exp2", "expm1", "sqrt", "mean", "nanmean",
             "average", "std", "nanstd", "var", "nanvar", "median", "nanmedian", "percentile", "nanpercentile",
             "quantile", "nanquantile", "sum", "nansum", "fsum", "prod", "nanprod", "cumsum", "stdev", "pstdev",
             "variance", "pvariance", "fmean", "harmonic_mean"}
# (enclosing function, call): the allowed uses, each drawing rather than a number shown
ALLOWED = {("smooth", "mean"): "moving average of a train-loss curve, for display",
           ("fig_loss", "percentile"): "the top of loss.png's y axis"}
bad, used = [], set()
for path in files:
    tree = ast.parse(open(path).read(), path)
    docstrings = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body \
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant):
            docstrings.add(id(n.body[0].value))

    def visit(node, func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in ("short_name", "find_floor"):
                bad.append("%s:%d: def %s" % (path, node.lineno, node.name))
            func = node.name
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in FORBIDDEN:
                if (func, name) in ALLOWED:
                    used.add((func, name))
                else:
                    bad.append("%s:%d: %s() in %s" % (path, node.lineno, name, func or "module"))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math" \
                and node.attr != "isfinite":
            bad.append("%s:%d: math.%s" % (path, node.lineno, node.attr))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for m in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]):
                if m.split(".")[0] in ("statistics", "scipy", "pandas"):
                    bad.append("%s:%d: import %s" % (path, node.lineno, m))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "floor.json" in node.value \
                and id(node) not in docstrings:
            bad.append("%s:%d: the string %r" % (path, node.lineno, node.value[:60]))
        for child in ast.iter_child_nodes(node):
            visit(child, func)
    visit(tree, None)
for x in bad:
    print("plot_test: " + x, file=sys.stderr)
print("  %d files; allowed: %s" % (len(files), "; ".join(
    "%s() in %s (%s)" % (c, f, ALLOWED[(f, c)]) for f, c in sorted(used))))
sys.exit(1 if bad else 0)
PY

echo "== the figure tables, the docstring and the summary's columns agree"
/usr/bin/python3 - "$ROOT/scripts" <<'PY' || fail "figure tables / docstring / summary columns"
import sys
sys.path.insert(0, sys.argv[1])
import plot
from plotlib import read, run_figures, sweep_figures
doc = plot.__doc__
assert "derives no number: every number comes from normlab report --json or the sweep summary" in doc
for table in (run_figures.RUN_FIGURES, sweep_figures.SWEEP_FIGURES):
    for name, fn, needs in table:
        assert name in doc, "%s is not in plot.py's docstring" % name
        assert callable(fn) and needs, name
# one name per number: the point numbers drawn are summary columns, under the summary's names
assert set(read.POINT_NUMBERS) <= set(read.SUMMARY_COLUMNS), read.POINT_NUMBERS
PY

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
[ -f "$SWEEP/summary.csv" ] && [ -f "$SWEEP/sweep.yaml" ] || fail "normlab sweep wrote no summary.csv or sweep.yaml"
"$PLOT" "$SWEEP" --group-by lr >"$TMP/sweep_plot.out" || fail "plot.py on a sweep"
cat "$TMP/sweep_plot.out"
check_pngs "$SWEEP/plots" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png
# the summary's metric columns are the ones plotlib.read names (one name per number)
/usr/bin/python3 - "$ROOT/scripts" "$SWEEP/summary.csv" <<'PY' || fail "summary.csv columns against plotlib.read.SUMMARY_COLUMNS"
import csv, sys
sys.path.insert(0, sys.argv[1])
from plotlib import read
header = next(csv.reader(open(sys.argv[2])))
assert header[header.index("status") + 1:] == read.SUMMARY_COLUMNS, (header, read.SUMMARY_COLUMNS)
PY

echo "== the same sweep without sweep.yaml: its summary.csv (mean/std rows), axes under their full keys"
cp -r "$SWEEP" "$TMP/sweep_csv"
rm "$TMP/sweep_csv/sweep.yaml"
"$PLOT" "$TMP/sweep_csv" >/dev/null 2>"$TMP/sweep_csv.err" || { cat "$TMP/sweep_csv.err" >&2; fail "plot.py on a sweep with summary.csv only"; }
grep -q "from summary.csv" "$TMP/sweep_csv.err" || fail "plot.py did not say it read summary.csv"
check_pngs "$TMP/sweep_csv/plots" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png
/usr/bin/python3 - "$ROOT/scripts" "$TMP/sweep_csv" <<'PY' || fail "the sweep read from summary.csv"
import csv, os, sys
sys.path.insert(0, sys.argv[1])
from plotlib import read
s = read.Sweep(sys.argv[2])
assert s.summary_source == "summary.csv" and s.short("optim.lr") == "optim.lr", (s.summary_source, s.shorts)
rows = list(csv.DictReader(open(os.path.join(sys.argv[2], "summary.csv"))))
for p in s.points:
    mean = [r for r in rows if r["row"] == "mean" and r["optim.lr"] == p["over"]["optim.lr"]
            and r["model.n_layers"] == p["over"]["model.n_layers"]]
    assert len(mean) == 1 and s.seed_stat("mean", p["over"], "best_val_loss") == float(mean[0]["best_val_loss"])
PY

echo "== a sweep without summary.csv (sweep.yaml: normlab report --json summarises it), with --runs"
rm "$SWEEP/summary.csv"
"$PLOT" "$SWEEP" --runs --out "$TMP/sweep_plots2" >/dev/null || fail "plot.py on a sweep without summary.csv"
check_pngs "$TMP/sweep_plots2" 8000 loss_curves.png final_vs_lr.png final_vs_depth.png
check_pngs "$TMP/sweep_plots2/runs/lr=1.0e-3,n_layers=2,seed=1337" 8000 $RUN_PNGS

echo "== synthetic directories with the newer diagnostics, and without them (tests/scripts/plot_fixtures.py)"
FX="$TMP/fx"
/usr/bin/python3 "$ROOT/tests/scripts/plot_fixtures.py" "$FX" || fail "plot_fixtures.py"
NEW_RUN_PNGS="act_max.png attn_sink.png block_cos.png eff_rank.png tasks.png grad_noise_scale.png qk_clip.png"
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

echo "-- a run with block_cos, act_max, attn_sink, grad_noise_scale, qk_clipped, eff_rank, by_task"
plot_quiet "$TMP/fx_new" "$FX/run_new"
check_pngs "$FX/run_new/plots" 8000 $RUN_PNGS $NEW_RUN_PNGS
for f in $NEW_RUN_PNGS; do grep -q "/$f\$" "$TMP/fx_new.out" || fail "plot.py did not print $f"; done

echo "-- the same run without them (an older binary's output)"
plot_quiet "$TMP/fx_old" "$FX/run_old"
check_pngs "$FX/run_old/plots" 8000 $RUN_PNGS
absent "$FX/run_old/plots" $NEW_RUN_PNGS

echo "-- a categorical sweep: layout x norm.type, 2 seeds, one diverged; its summary from normlab report --json"
plot_quiet "$TMP/fx_cat" "$FX/sweep_cat"
check_pngs "$FX/sweep_cat/plots" 8000 loss_curves.png $CAT_PNGS
absent "$FX/sweep_cat/plots" final_vs_lr.png final_vs_depth.png
/usr/bin/python3 - "$ROOT/scripts" "$FX/sweep_cat" <<'PY' || fail "the categorical sweep as plotlib.read reads it"
import sys
sys.path.insert(0, sys.argv[1])
from plotlib import read
s = read.Sweep(sys.argv[2])
assert s.summary_source == "normlab report --json", s.summary_source
assert s.axes == ["model.layout", "model.norm.type"], s.axes
assert read.categorical_axes(s) == s.axes, read.categorical_axes(s)
assert [s.short(a) for a in s.axes] == ["layout", "norm.type"], s.shorts  # the binary's short names
score = {p["name"]: p["spike_score"] for p in s.points}
assert all(0 <= v <= 1 for v in score.values()), score
assert score["layout=post,norm.type=layernorm,seed=1"] > 0, score  # the fixture's spike at step 120
div = [p for p in s.points if p["diverged"]]
assert [p["name"] for p in div] == ["layout=post,norm.type=layernorm,seed=2"], [p["name"] for p in div]
# the diverged seed has a finite best val loss (it diverged after its last eval): the summary's
# mean counts it, and the figures use that mean
over = div[0]["over"]
assert read.finite(div[0]["best_val_loss"]) and read.finite(s.seed_stat("mean", over, "best_val_loss"))
assert read.finite(s.seed_stat("std", over, "best_val_loss"))
PY
plot_quiet "$TMP/fx_cat2" "$FX/sweep_cat" --group-by type --out "$TMP/fx_cat2_plots"
check_pngs "$TMP/fx_cat2_plots" 8000 loss_curves.png $CAT_PNGS

echo "-- a one-axis categorical sweep of old-style runs, no sweep.yaml, no summary.csv, with --runs"
"$PLOT" "$FX/sweep_old" --runs >"$TMP/fx_cat_old.out" 2>"$TMP/fx_cat_old.err" ||
  { cat "$TMP/fx_cat_old.err" >&2; fail "plot.py on a sweep without a summary"; }
grep -q "no sweep summary" "$TMP/fx_cat_old.err" || fail "plot.py did not say the sweep has no summary"
if grep -qE "Traceback|Warning" "$TMP/fx_cat_old.err"; then cat "$TMP/fx_cat_old.err" >&2; fail "plot.py warned"; fi
check_pngs "$FX/sweep_old/plots" 8000 loss_curves.png best_val_compare.png grad_profile_step0.png
absent "$FX/sweep_old/plots" block_cos_profile.png final_vs_lr.png final_vs_depth.png
check_pngs "$FX/sweep_old/plots/runs/norm.type=rmsnorm,seed=2" 8000 $RUN_PNGS

echo "== a tuned sweep (tune:): a real one, its basin and forest figures"
TUNE="$TMP/tune"
cat >"$TMP/tune.yaml" <<YAML
base: $ROOT/configs/default.yaml
out_dir: $TUNE
set: {model.d_model: 32, model.n_heads: 2, model.d_ff: 64, model.ctx: 32, model.n_layers: 1, train.batch_size: 4,
      train.steps: 20, train.log_every: 5, eval.every: 10, eval.max_windows: 4, optim.warmup: 5}
axes: {model.layout: [pre, post]}
tune: {key: optim.lr, values: [1.0e-3, 3.0e-3, 1.0e-2], seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre}}
YAML
"$BIN" sweep -c "$TMP/tune.yaml" --jobs 2 >/dev/null 2>"$TMP/tune.log" || { cat "$TMP/tune.log" >&2; fail "normlab sweep (tuned)"; }
[ -f "$TUNE/summary.json" ] || fail "the tuned sweep wrote no summary.json"
plot_quiet "$TMP/tune_plot" "$TUNE"
check_pngs "$TUNE/plots" 8000 tune_basin.png tune_forest.png tune_profiles.png loss_curves.png
absent "$TUNE/plots" grad_profile_step0.png block_cos_profile.png  # a line per search run: tune_profiles instead
for f in tune_basin.png tune_forest.png tune_profiles.png; do grep -q "/$f\$" "$TMP/tune_plot.out" || fail "plot.py did not print $f"; done

echo "-- the numeric sweep above (lr x depth) gets no categorical plots and no tune figures"
absent "$SWEEP/plots" $CAT_PNGS tune_basin.png tune_forest.png

echo "== every number drawn is the report's: a stand-in binary with sentinel values, then with none"
# FAKE_REPORT=sentinel: `report --json` of a run gets the sentinels below, of a sweep sentinel mean and
# std rows and short names; FAKE_REPORT=null: the run's values null, and no sweep summary (exit 1).
# Every other command goes to the real binary unchanged.
cat >"$TMP/fake_normlab" <<'PY'
#!/usr/bin/python3
import json, os, subprocess, sys
out = subprocess.run([os.environ["REAL_NORMLAB"]] + sys.argv[1:], stdout=subprocess.PIPE, universal_newlines=True)
if out.returncode != 0 or sys.argv[1:3] != ["report", "--json"]:
    sys.stdout.write(out.stdout)
    sys.exit(out.returncode)
mode, j = os.environ["FAKE_REPORT"], json.loads(out.stdout)
RUN = {"entropy_floor": 0.625, "train_entropy_floor": 0.875, "uniform_attn_entropy": 2.25,
       "uniform_attn_sink": 0.375, "ctx": 77, "grad_ratio_first_last": 7.25, "final_eff_rank": 12.5,
       "final_val_bpb": 3.125, "best_val_bpb": 3.0}
if "rows" in j:
    if mode == "null":
        sys.exit(1)
    for a in j["axes"]:
        a["short"] = a["short"].upper() + "_S"
    for r in j["rows"]:
        if r["row"] == "mean":
            r.update(final_train_loss=4.75, best_val_loss=2.0625, spike_score=0.0078125, final_eff_rank=10.5)
        elif r["row"] == "std":
            r.update(final_train_loss=0.03125, best_val_loss=0.03125)
    if isinstance(j.get("tune"), dict):  # a tuned sweep: sentinel m(v), v*, l0 and verdicts
        for i, a in enumerate(j["tune"]["arms"]):
            a.update(search=[3.25 + i, 2.5 + i, 2.75 + i], selected=a["values"][1], l0=5.125, at_edge=False,
                     sensitivity=0.375, at_entropy=False)
            a["vs_baseline"] = ({"delta": None, "ci": None, "p": None, "df": None, "verdict": "baseline"} if i == 0 else
                                {"delta": -0.125, "ci": [-0.25, -0.0625], "p": 0.03125, "df": 3.5, "verdict": "better",
                                 "p_adj": 0.0625, "digits": 4, "mde": 0.1875})
else:
    j.update({k: (v if mode == "sentinel" else None) for k, v in RUN.items()})
print(json.dumps(j))
PY
chmod +x "$TMP/fake_normlab"
cp -r "$SWEEP" "$TMP/sweep_fake"  # lr x depth, with its sweep.yaml
cat >"$TMP/capture.py" <<'PY'
"""Draws a directory's figures through plotlib with `save` replaced by a capture of each figure's
texts and the y data of its lines; prints them as JSON."""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import matplotlib
matplotlib.use("Agg")
import matplotlib.collections, matplotlib.lines, matplotlib.pyplot as plt, matplotlib.text
from plotlib import read, run_figures, sweep_figures
figs = {}
def capture(fig, path):
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    ys, xs = [], []
    for ln in fig.findobj(matplotlib.lines.Line2D):
        try:
            ys.append([float(v) for v in ln.get_ydata()])
        except (TypeError, ValueError):
            continue
        try:
            xs.append([float(v) for v in ln.get_xdata()])
        except (TypeError, ValueError):
            xs.append(None)
    # one-point lines (markers): x, y and whether hollow; scatter points (pinned markers): x, y
    marks = [[float(ln.get_xdata()[0]), float(ln.get_ydata()[0]), str(ln.get_markerfacecolor()) == "white",
              str(ln.get_marker())]
             for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata()) == 1]  # not the legend's
    scatter = [[float(v) for v in xy] for c in fig.findobj(matplotlib.collections.PathCollection)
               for xy in c.get_offsets()]
    figs[os.path.basename(path)] = {"texts": texts, "ys": ys, "xs": xs, "marks": marks, "scatter": scatter}
    plt.close(fig)
    return path
run_figures.save = sweep_figures.save = capture
kind, d = sys.argv[2], sys.argv[3]
if kind == "run":
    run_figures.plot_run(read.Run(d), "/nonexistent")
elif kind == "join":  # d: TABLE[@RUNG],... as plot.py --join takes them
    tables = []
    for spec in d.split(","):
        path, _, rung = spec.rpartition("@") if "@" in spec else (spec, "", "")
        tables.append((os.path.basename(path), read.read_tuned_md(path, "model.n_layers", rung or None)))
    sweep_figures.fig_joined_ladder(tables, "model.n_layers", "/nonexistent/joined.png")
    sweep_figures.fig_joined_rates(tables, "model.n_layers", "/nonexistent/joined_rates.png")
elif kind == "transfer":  # d: a file with a summary's "tune" object (a ladder)
    class Stub:
        label, tune = "stub", json.load(open(d))
        def short(self, axis):
            return axis.split(".")[-1].upper() + "_S"
    sweep_figures.fig_tune_transfer(Stub(), None, "/nonexistent")
elif kind == "fit":  # d: a file with a summary's "tune" object (no ladder, tune.fit)
    class Stub:
        label, tune = "stub", json.load(open(d))
        def short(self, axis):
            return axis.split(".")[-1].upper() + "_S"
    sweep_figures.fig_tune_fit(Stub(), None, "/nonexistent")
else:
    sweep_figures.plot_sweep(read.Sweep(d), None, "/nonexistent", False)
print(json.dumps(figs))
PY
capture() {  # MODE KIND DIR > JSON
  REAL_NORMLAB="$BIN" FAKE_REPORT=$1 NORMLAB_BINARY="$TMP/fake_normlab" \
    /usr/bin/python3 "$TMP/capture.py" "$ROOT/scripts" "$2" "$3" 2>>"$TMP/capture.err"
}
capture sentinel run "$FX/run_new" >"$TMP/cap_run.json" || { cat "$TMP/capture.err" >&2; fail "capture run (sentinel)"; }
capture null run "$FX/run_new" >"$TMP/cap_run_null.json" || { cat "$TMP/capture.err" >&2; fail "capture run (null)"; }
capture sentinel sweep "$FX/sweep_cat" >"$TMP/cap_cat.json" || { cat "$TMP/capture.err" >&2; fail "capture sweep_cat"; }
capture sentinel sweep "$TMP/sweep_fake" >"$TMP/cap_lr.json" || { cat "$TMP/capture.err" >&2; fail "capture lr x depth"; }
capture null sweep "$FX/sweep_cat" >"$TMP/cap_cat_null.json" || { cat "$TMP/capture.err" >&2; fail "capture sweep_cat (null)"; }
cp -r "$TUNE" "$TMP/tune_fake"
# µP's protocol: a ladder searched at its first rung only, its rate carried to the second, a fit at
# both. The carried rung's curve is its confirm means over the fit's bracket (sentinels).
cat >"$TMP/transfer_one_search.json" <<'JSON'
{"key": "optim.lr", "metric": "best_val", "ladder": "model.d_model", "rungs": [64, 512],
 "arms": [{"stem": "", "rung": 64, "values": [0.004, 0.008, 0.016], "search": [2.75, 2.5, 2.625],
           "selected": 0.008, "fit": {"value": 0.0109375, "low": 0.0101, "high": 0.0121,
           "points": [0.004, 0.008, 0.016], "means": [2.8125, 2.5625, 2.6875]}},
          {"stem": "", "rung": 512, "transferred": true, "from_rung": 64, "values": [0.004, 0.008, 0.016],
           "search": [], "selected": 0.008, "fit": {"value": 0.0134375, "low": 0.0105, "high": 0.0255,
           "points": [0.004, 0.008, 0.016], "means": [2.4375, 2.40625, 2.34375]}}],
 "transfer": [{"stem": "", "searched": [{"rung": 64, "selected": 0.008, "at_edge": false}], "slope": null,
               "fitted": [{"rung": 64, "value": 0.0109375, "low": 0.0101, "high": 0.0121},
                          {"rung": 512, "value": 0.0134375, "low": 0.0105, "high": 0.0255}],
               "fitted_slope": 0.09375, "fitted_slope_low": 0.015625, "fitted_slope_high": 0.4375}]}
JSON
capture sentinel transfer "$TMP/transfer_one_search.json" >"$TMP/cap_transfer.json" || { cat "$TMP/capture.err" >&2; fail "capture transfer (one searched rung)"; }
# A flat sweep with tune.fit: each arm's confirm means over its bracket, the parabola through them,
# its fitted optimum with the bootstrap interval (sentinels; the second arm's optimum at its
# bracket's end).
cat >"$TMP/fit_flat.json" <<'JSON'
{"key": "optim.lr", "metric": "best_val", "fit": "quadratic", "seeds": [1],
 "arms": [{"name": "layout=pre", "axes": {"model.layout": "pre"}, "values": [0.004, 0.008, 0.016, 0.032],
           "search": [2.75, 2.5, 2.625, 3.0], "selected": 0.008, "vs_baseline": {"verdict": "baseline"},
           "fit": {"value": 0.0078125, "low": 0.0070, "high": 0.0090, "at_edge": false,
                   "points": [0.00390625, 0.0078125, 0.015625], "means": [2.8125, 2.5625, 2.6875]}},
          {"name": "layout=post", "axes": {"model.layout": "post"}, "values": [0.004, 0.008, 0.016, 0.032],
           "search": [3.0, 2.875, 2.75, 2.625], "selected": 0.032, "vs_baseline": {"verdict": "worse"},
           "fit": {"value": 0.03125, "low": 0.0125, "high": 0.03125, "at_edge": true,
                   "points": [0.0078125, 0.015625, 0.03125], "means": [2.9375, 2.8125, 2.6875]}}]}
JSON
capture sentinel fit "$TMP/fit_flat.json" >"$TMP/cap_fit.json" || { cat "$TMP/capture.err" >&2; fail "capture fit (flat)"; }
capture sentinel sweep "$TMP/tune_fake" >"$TMP/cap_tune.json" || { cat "$TMP/capture.err" >&2; fail "capture tuned sweep"; }
capture null sweep "$TMP/tune_fake" >"$TMP/cap_tune_null.json" || { cat "$TMP/capture.err" >&2; fail "capture tuned sweep (null)"; }
# --join: rungs from three summary.md tables with sentinel values: a ladder's (rungs 2 and 4, three
# arms, then a `## Runs` section with a tuned-looking table that must not be read), one replacing
# its rung 4 for one arm, and a single rung named @8 where that arm learned nothing; two of them
# name the arms without `type`, as a sweep without that axis names them. Deepnorm's rung-2 value is
# the grid's edge, post's rung-4 value in the ladder is carried from rung 2 (seen where the ladder
# is joined alone).
TUNED_HEAD='| arm | selected optim.lr | edge | sensitivity | confirm mean ± std (n) | Δ [95 % interval] | p | p_adj | mde | verdict |
|---|---:|---|---:|---:|---:|---:|---:|---:|---|'
TUNED_TEXT="Search: ... Δ = confirm mean - the baseline's; p_adj: Holm's step-down correction over the arms; equivalent when the 90 % interval lies inside ±0.015625 (two one-sided tests at 5 %)."
BASE_ROW='| layout=pre,type=sp | 8.0e-3 |  | 0.1 | 2.5000 ± 0.0100 (8) | - | - | - | - | baseline |'
cat >"$TMP/join_ladder.md" <<EOF
# Sweep runs/sweeps/fake_ladder

## Tuned comparison: optim.lr per arm, by best_val

$TUNED_TEXT

### model.n_layers = 2

$TUNED_HEAD
$BASE_ROW
| layout=post,type=sp | 2.0e-3 |  | 0.2 | 2.6250 ± 0.0100 (8) | +0.125 [+0.0625, +0.1875] | 1e-05 | 2e-05 | 0.015 | worse |
| layout=deepnorm,type=sp | 4.0e-3 | edge | 0.2 | 2.5312 ± 0.0100 (8) | +0.03125 [+0.015625, +0.046875] | 1e-05 | 2e-05 | 0.015 | worse |
| layout=pre,type=completep | 8.0e-3 |  | 0.2 | 2.5000 ± 0.0100 (8) | +0.0000 [+0.0000, +0.0000] | 1 | 1 | 0.0000 | equivalent |

### model.n_layers = 4

$TUNED_HEAD
$BASE_ROW
| layout=post,type=sp | 1.0e-3 from 2 |  | 0.2 | 2.7500 ± 0.0100 (8) | +0.25 [+0.125, +0.375] | 1e-05 | 2e-05 | 0.015 | worse |
| layout=deepnorm,type=sp | 2.0e-3 |  | 0.2 | 2.5469 ± 0.0100 (8) | +0.046875 [+0.03125, +0.0625] | 1e-05 | 2e-05 | 0.015 | worse |
| layout=pre,type=completep | 1.6e-2 |  | 0.2 | 2.5078 ± 0.0100 (8) | +0.0078125 [-0.01, +0.02] | 0.5 | 0.5 | 0.03 | inconclusive |

## Runs

### model.n_layers = 2

$TUNED_HEAD
| layout=post,type=sp | 9.9 |  | 0.2 | 9.9 ± 0.0100 (8) | +9.0 [+8.5, +9.5] | 1e-05 | 2e-05 | 0.015 | worse |
EOF
cat >"$TMP/join_rung4.md" <<EOF
## Tuned comparison: optim.lr per arm, by best_val

$TUNED_TEXT

$TUNED_HEAD
| layout=pre | 8.0e-3 |  | 0.1 | 2.5000 ± 0.0100 (8) | - | - | - | - | baseline |
| layout=post | 1.0e-3 |  | 0.2 | 3.0000 ± 0.0100 (8) | +0.5 [+0.375, +0.625] | 0.25 | 0.5 | 0.75 | inconclusive |
EOF
cat >"$TMP/join_rung8.md" <<EOF
## Tuned comparison: optim.lr per arm, by best_val

$TUNED_TEXT

$TUNED_HEAD
| layout=pre | 8.0e-3 |  | 0.1 | 2.5000 ± 0.0100 (8) | - | - | - | - | baseline |
| layout=post | 1.0e-3 |  | 0.2 | 5.5000 ± 0.0100 (8) | +3.0 [+2.5, +3.5] | 1e-05 | 2e-05 | 0.015 | worse (learned nothing: at the unigram entropy) |
| layout=deepnorm | 1.0e-3 given |  | - | 2.8750 ± 0.0100 (8) | +0.375 [+0.3125, +0.4375] | 1e-05 | 2e-05 | 0.015 | worse |
EOF
JOIN_SPEC="$TMP/join_ladder.md,$TMP/join_rung4.md@4,$TMP/join_rung8.md@8"
capture sentinel join "$JOIN_SPEC" >"$TMP/cap_join.json" || { cat "$TMP/capture.err" >&2; fail "capture --join"; }
capture sentinel join "$TMP/join_ladder.md" >"$TMP/cap_join_ladder.json" || { cat "$TMP/capture.err" >&2; fail "capture --join (one ladder)"; }
echo "-- plot.py --join: the figure from the command line, and its one-line errors"
/usr/bin/python3 "$PLOT" --join model.n_layers "$TMP/joined.png" ${JOIN_SPEC//,/ } >/dev/null \
  && [[ -s "$TMP/joined.png" && -s "$TMP/joined_rates.png" ]] || fail "plot.py --join on three tables (both figures)"
join_err() {  # EXPECTED_TEXT ARGS...: exit 2 and the message
  local want=$1; shift
  if /usr/bin/python3 "$PLOT" --join "$@" >/dev/null 2>"$TMP/join.err"; then fail "plot.py --join $* did not fail"; fi
  grep -qF "$want" "$TMP/join.err" || fail "plot.py --join $*: no '$want' in: $(cat "$TMP/join.err")"
}
join_err "a ladder over model.n_layers" model.d_model "$TMP/x.png" "$TMP/join_ladder.md"
join_err "name its rung as" model.n_layers "$TMP/x.png" "$TMP/join_rung8.md"
join_err "no tuned table at model.n_layers = 16" model.n_layers "$TMP/x.png" "$TMP/join_ladder.md@16"
join_err "no such file" model.n_layers "$TMP/x.png" "$TMP/nothing.md"
/usr/bin/python3 - "$TMP" <<'PY' || fail "a figure shows a number that is not the report's"
import json, os, re, sys
t = sys.argv[1]
def load(n):  # texts with their line breaks (textwrap.fill of titles) as spaces
    figs = json.load(open(os.path.join(t, n)))
    for f in figs.values():
        f["texts"] = [" ".join(x.split()) for x in f["texts"]]
    return figs
bad = []
def has_text(figs, f, s):
    if not any(s in x for x in figs[f]["texts"]):
        bad.append("%s: no text with %r (texts: %s)" % (f, s, [x for x in figs[f]["texts"] if len(x) < 120][:40]))
def no_text(figs, f, pattern):
    hits = [x for x in figs[f]["texts"] if re.search(pattern, x)]
    if hits:
        bad.append("%s: text %r although the report has no such number" % (f, hits[0]))
def has_line(figs, f, ys, count=1):
    n = sum(1 for y in figs[f]["ys"] if y == ys)
    if n < count:
        bad.append("%s: %d line(s) with y = %s, wanted %d" % (f, n, ys, count))
def no_line(figs, f, ys):
    if any(y == ys for y in figs[f]["ys"]):
        bad.append("%s: a line at y = %s" % (f, ys))

run = load("cap_run.json")
has_text(run, "loss.png", "entropy floor (best possible val loss) 0.625")
has_line(run, "loss.png", [0.625, 0.625])
has_text(run, "loss.png", "last eval 3.125 bits/byte, best 3.000")
has_text(run, "layers.png", "uniform causal attention (T=77): 2.25")
has_line(run, "layers.png", [2.25, 2.25])
has_text(run, "attn_sink.png", "uniform causal attention (T=77): 0.375")
has_line(run, "attn_sink.png", [0.375, 0.375])
has_text(run, "grad_profile.png", "first/last block = 7.25")
has_text(run, "eff_rank.png", "final 12.5")
has_text(run, "eff_rank.png", "entropy floor 0.625")

null = load("cap_run_null.json")
for f, s in (("loss.png", "entropy floor"), ("loss.png", "bits/byte"), ("layers.png", "uniform causal attention"),
             ("attn_sink.png", "uniform causal attention"), ("grad_profile.png", "first/last block"),
             ("eff_rank.png", r"final \d"), ("eff_rank.png", "entropy floor")):
    no_text(null, f, s)

cat = load("cap_cat.json")
has_text(cat, "best_val_compare.png", "LAYOUT_S")
has_text(cat, "best_val_compare.png", "NORM.TYPE_S=layernorm")
has_text(cat, "best_val_compare.png", "seed mean (sweep summary: the seeds with a finite value, diverged ones included)")
has_line(cat, "best_val_compare.png", [2.0625], count=6)  # the mean of each of the 6 groups
has_line(cat, "best_val_compare.png", [0.0078125], count=6)
has_line(cat, "best_val_compare.png", [10.5], count=6)
has_text(cat, "loss_curves.png", "LAYOUT_S=pre (4 runs)")
has_text(cat, "loss_curves.png", "entropy floor 0.625")
has_line(cat, "loss_curves.png", [0.625, 0.625])

lr = load("cap_lr.json")
has_text(lr, "final_vs_lr.png", "loss against LR_S")
has_text(lr, "final_vs_lr.png", "N_LAYERS_S=1")
has_line(lr, "final_vs_lr.png", [4.75, 4.75], count=2)    # the mean line of each depth, from the mean rows
has_line(lr, "final_vs_lr.png", [4.71875, 4.71875], count=2)  # its std bar's lower caps: 4.75 - 0.03125
has_line(lr, "final_vs_lr.png", [4.78125, 4.78125], count=2)
has_line(lr, "final_vs_lr.png", [2.0625, 2.0625], count=2)
has_text(lr, "final_vs_lr.png", "entropy floor 0.875 (below this range)")  # the report's train_entropy_floor

def has_xy(figs, f, xs, ys, count=1):
    n = sum(1 for x, y in zip(figs[f]["xs"], figs[f]["ys"]) if x == xs and y == ys)
    if n < count:
        bad.append("%s: %d line(s) at x = %s, y = %s, wanted %d" % (f, n, xs, ys, count))

tr, T = load("cap_transfer.json"), "tune_transfer.png"  # searched at 64 only, carried to 512
has_xy(tr, T, [0.004, 0.008, 0.016], [2.75, 2.5, 2.625])  # the searched rung: its search m(v)
has_xy(tr, T, [0.004, 0.008, 0.016], [2.4375, 2.40625, 2.34375])  # the carried rung: its confirm means
has_xy(tr, T, [0.008], [2.40625])  # v* starred on the carried rung's curve
has_xy(tr, T, [64.0, 512.0], [0.0109375, 0.0134375])  # the fitted optimum against the rung
has_text(tr, T, "D_MODEL_S = 512: confirm means (carried from 64)")
has_text(tr, T, "fitted, slope +0.09 [+0.02, +0.44]")
has_text(tr, T, "grid v* (searched here only)")
no_line(tr, T, [2.8125, 2.5625, 2.6875])  # a searched rung draws its search, not its confirm means
fit, F = load("cap_fit.json"), "tune_fit.png"  # a flat sweep's fitted optima, from tune.arms[].fit
has_xy(fit, F, [0.00390625, 0.0078125, 0.015625], [2.8125, 2.5625, 2.6875])  # the baseline's confirm means
has_xy(fit, F, [0.0078125, 0.015625, 0.03125], [2.9375, 2.8125, 2.6875])
has_xy(fit, F, [0.004, 0.008, 0.016, 0.032], [2.75, 2.5, 2.625, 3.0])  # its search m(v), faint
has_xy(fit, F, [0.007, 0.009], [1.0, 1.0])  # the baseline's interval, top row
has_xy(fit, F, [0.0125, 0.03125], [0.0, 0.0])  # the second arm's, bottom row
has_xy(fit, F, [0.0078125], [1.0])  # the optima
has_xy(fit, F, [0.03125], [0.0])
has_text(fit, F, "0.00781 [0.007, 0.009]")  # 3 significant digits
has_text(fit, F, "0.0312 [0.0125, 0.0312]")
marks = [m for m in fit[F]["marks"] if m[3] == "D"]
want = [[0.0078125, 1.0, False], [0.03125, 0.0, True]]  # hollow at the bracket's end
if sorted(m[:3] for m in marks) != sorted(want):
    bad.append("%s: optima marked at %s, wanted %s" % (F, marks, want))
has_xy(fit, F, [0.0078125, 0.0078125], [0.0, 1.0])  # the optima as vertical lines on the left
has_xy(fit, F, [0.03125, 0.03125], [0.0, 1.0])
has_text(fit, F, "LAYOUT_S=post")
tune = load("cap_tune.json")  # every number of the basin and the forest is the summary's tune.arms[]
has_xy(tune, "tune_basin.png", [0.001, 0.003, 0.01], [3.25, 2.5, 2.75])  # m(v) of each arm at its values
has_xy(tune, "tune_basin.png", [0.001, 0.003, 0.01], [4.25, 3.5, 3.75])
has_xy(tune, "tune_basin.png", [0.003], [2.5])  # v* starred at its m(v)
has_xy(tune, "tune_basin.png", [0.003], [3.5])
has_text(tune, "tune_basin.png", "LAYOUT_S=post (LR_S* = 0.003); l0 5.125, sensitivity 0.375")
has_xy(tune, "tune_forest.png", [-0.25, -0.0625], [1.0, 1.0])  # the 95 % interval of the second arm
has_xy(tune, "tune_forest.png", [-0.125], [1.0])  # its delta
has_xy(tune, "tune_forest.png", [0.0], [0.0])  # the baseline arm at 0
has_text(tune, "tune_forest.png", "better Δ -0.1250 [-0.2500, -0.0625] p 0.031 p_adj 0.062")  # p to 2 significant digits
has_text(tune, "tune_forest.png", "LAYOUT_S=pre")
tunen = load("cap_tune_null.json")  # no sweep summary: no tune figures at all
for f in ("tune_basin.png", "tune_forest.png"):
    if f in tunen:
        bad.append("%s drawn without a sweep summary" % f)

join = load("cap_join.json")  # every number is the tables' as printed; a later table's row wins
has_line(join, "joined.png", [0.125, 0.5])  # post's line: rung 4 from join_rung4.md, rung 8 off the axis
has_line(join, "joined.png", [0.03125, 0.046875, 0.375])  # deepnorm's, under two names
has_line(join, "joined.png", [0.0, 0.0078125])  # completep's
for ys in ([0.0625, 0.1875], [0.375, 0.625], [0.3125, 0.4375]):  # intervals
    has_line(join, "joined.png", ys)
marks = {y: hollow for _x, y, hollow, _m in join["joined.png"]["marks"]}
for y, hollow in ((0.125, False), (0.5, True), (0.375, False), (0.0, True), (0.0078125, True)):
    if marks.get(y) is not hollow:  # filled where the verdict is better / worse, else hollow
        bad.append("joined.png: the marker at Δ = %s is %s, wanted %s" % (y, marks.get(y), "hollow" if hollow else "filled"))
pinned = [xy for xy in join["joined.png"]["scatter"] if xy[1] == 0.97]
if len(pinned) != 1 or not 7.5 < pinned[0][0] < 8.5:
    bad.append("joined.png: wanted one marker pinned at the top at rung 8 (learned nothing), got %s" % pinned)
for label in ("layout=post", "layout=deepnorm", "layout=pre,type=completep"):  # `type=sp` (shared) left out
    if label not in join["joined.png"]["texts"]:
        bad.append("joined.png: no legend label %r" % label)
no_text(join, "joined.png", "type=sp")
has_text(join, "joined.png", "at the top: learned nothing")
has_text(join, "joined.png", "equivalence margin ±0.015625")
has_text(join, "joined.png", "after Holm")
has_text(join, "joined.png", "Δ best_val against the baseline")
for y in join["joined.png"]["ys"]:
    if any(v in (0.25, 3.0, 9.0) for v in y):
        bad.append("joined.png: a replaced row (0.25), the arm that learned nothing (3.0) or the Runs section's "
                   "table (9.0) drawn on the axis: %s" % y)

# the selected values against size: the baseline's under its two names one line, a replaced row's
# value not drawn, no line through an arm that learned nothing, the marker saying where a value came from
R = "joined_rates.png"
has_line(join, R, [0.008, 0.008, 0.008])  # the baseline: layout=pre,type=sp and layout=pre, one arm
has_line(join, R, [0.002, 0.001])  # post: rung 4 from join_rung4.md, rung 8 (learned nothing) off the line
has_line(join, R, [0.004, 0.002, 0.001])  # deepnorm, under two names
has_line(join, R, [0.008, 0.016])  # completep
def mark(figs, f, x, y):  # the one marker near rung x at value y: (hollow, marker)
    found = [(h, m) for mx, my, h, m in figs[f]["marks"] if my == y and x / 1.2 < mx < x * 1.2]
    if len(found) != 1:
        bad.append("%s: %d markers at rung %s, value %s, wanted 1" % (f, len(found), x, y))
        return None
    return found[0]
for x, y, want in ((2, 0.004, (True, "o")),  # deepnorm: the grid's edge
                   (4, 0.002, (False, "o")), (2, 0.002, (False, "o")),  # searched there
                   (8, 0.001, None)):  # deepnorm's value given (hollow square) and post learned nothing (^) at 8
    if want and mark(join, R, x, y) != want:
        bad.append("%s: the marker at rung %s, value %s is %s, wanted %s" % (R, x, y, mark(join, R, x, y), want))
at8 = sorted((h, m) for mx, my, h, m in join[R]["marks"] if my == 0.001 and 6 < mx < 10)
if at8 != [(True, "^"), (True, "s")]:
    bad.append("%s: at rung 8, value 0.001, wanted deepnorm's hollow square (given) and post's hollow triangle, got %s" % (R, at8))
has_text(join, R, "square: given (chosen outside the sweep)")
ladder = load("cap_join_ladder.json")
if mark(ladder, R, 4, 0.001) != (False, "x"):  # post's rung-4 value carried from rung 2
    bad.append("%s (the ladder alone): post's carried value at rung 4 is not an x" % R)
has_line(ladder, R, [0.002, 0.001])
for label in ("layout=pre (baseline)", "layout=post", "layout=deepnorm", "layout=pre,type=completep"):
    if label not in join[R]["texts"]:
        bad.append("%s: no legend label %r" % (R, label))
has_text(join, R, "hollow: the grid's edge (widen it)")
has_text(join, R, "triangle: learned nothing there")
has_text(ladder, R, "x: carried from another rung")
no_text(ladder, R, "square: given")  # the ladder alone has no given value
no_text(join, R, "x: carried")  # every carried value in the three tables was replaced
has_text(join, R, "selected optim.lr (log scale)")
no_text(join, R, "slope")  # the figure derives no number
for y in join[R]["ys"]:
    if any(v == 9.9 for v in y):
        bad.append("%s: the Runs section's table drawn: %s" % (R, y))

catn = load("cap_cat_null.json")  # no sweep summary and no floors: no means, no floor line
has_text(catn, "best_val_compare.png", "no sweep summary, so no mean")
no_text(catn, "best_val_compare.png", "seed mean")
no_text(catn, "loss_curves.png", "entropy floor")
has_text(catn, "best_val_compare.png", "model.layout")  # no short names without the summary
for x in bad:
    print("plot_test: " + x, file=sys.stderr)
print("  sentinels found where expected: %s" % ("no" if bad else "yes"))
sys.exit(1 if bad else 0)
PY

echo "plot_test: OK"
