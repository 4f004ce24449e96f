#!/usr/bin/python3
"""Plots for NormLab runs and sweeps: PNGs a newcomer can read, written next to the data.

    scripts/plot.py DIR [--group-by KEY] [--out OUTDIR] [--runs] [--normlab PATH]

    DIR              a run directory (holds metrics.jsonl) or a sweep directory (holds sweep.yaml,
                     summary.csv or runs/*/point.json, see `normlab sweep`)
    --group-by KEY   sweep only: the axis whose values get one colour each in the overlaid loss
                     curves (full dotted key such as model.layout, or its short name `layout`);
                     default: the first axis of the sweep that takes more than one value
    --out OUTDIR     where the PNGs go (default: DIR/plots/)
    --runs           sweep only: also write every run's own plots (OUTDIR/runs/<name>/)
    --normlab PATH   the normlab binary (default: $NORMLAB_BINARY, else build/normlab in the
                     repository)

Each file written is printed on stdout, one path a line.

This script derives no number: every number comes from normlab report --json or the sweep summary.
The numbers a figure shows or places a line or marker at (entropy floors, uniform-attention
levels, the first/last-block gradient ratio, final eff_rank, bits per byte, spike score,
divergence, final train and best val loss, the seed mean and std, the axes' short names) are keys of
`normlab report --json RUN` or rows of `normlab report --json SWEEP` (the sweep summary; its
summary.csv where the binary cannot give it), defined once in src/metrics/records.cpp.
metrics.jsonl is read only for the series drawn over steps and the spike records marked; the
autopsy figures draw the autopsy JSON as it is. Drawing choices (smoothing a curve for display,
log axes, axis limits, which logged steps to draw) are not numbers shown.
Seed statistics: where a figure draws a seed mean it is the summary's `mean` row (with its `std`
row as the bar in final_vs_*.png): over the seeds with a finite value; a diverged seed with a
finite value counts like any other, one without (NaN/inf or no record) is left out; std is the
sample std (n - 1). Every seed is drawn as well, a diverged or failed one hollow.

Run (from metrics.jsonl and normlab report --json RUN):
    loss.png          train and val loss against update step, the entropy floor, spikes marked, the
                      last and best val bits per byte (final_val_bpb, best_val_bpb) in the legend;
                      a lower panel with the global gradient norm and its spikes
    grad_heatmap.png  per-block gradient norm (layers.grad_norm) over steps, log colour scale
    grad_profile.png  per-block gradient norm at the first, ~25%, 50% and last logged steps, the
                      report's grad_ratio_first_last beside the step it is of
    layers.png        residual-stream RMS (act_rms) and attention max logit / entropy per block, with
                      the report's uniform_attn_entropy
  Only when the run logs the series (src/metrics/README.md; older runs simply lack these files):
    act_max.png           max |x| of the residual stream per position over steps (log), and against
                          depth next to act_rms at a few steps (massive activations)
    attn_sink.png         attention probability on position 0 per block over steps, with the
                          report's uniform_attn_sink (uniform causal attention's level)
    block_cos.png         cos(stream entering, stream leaving) per block: depth x step heatmap
                          (near 1 = the block barely changes the stream)
    layers_<name>.png     every other layers.<name> series (layers.act_kurtosis, and any statistic
                          added later): one line per block or stream position over steps
    eff_rank.png          val loss and the effective rank of the final representation per eval, the
                          report's final_eff_rank
    tasks.png             each task's validation loss per eval (eval records' by_task, eval.by_task)
    grad_noise_scale.png  the simple gradient noise scale B_simple over diagnostic steps
    qk_clip.png           number of attention heads QK-Clip clipped per logged step
    depth_weights.png     the last diagnostics record's depth-attention weights (AttnRes), reader x source
    autopsy_step_<N>.png  each step autopsy `normlab replay` wrote (spikes/step_<N>.autopsy.json): the
                          loss of every row at N against N-1, per-block gradient norms and update
                          ratios, per-head max logit and entropy
    scripts/plot.py --autopsy FILE.autopsy.json  draws one autopsy to FILE.autopsy.png
Rungs that ran as separate sweeps (a depth ladder's deepest rungs, each its own sweep file):
    scripts/plot.py --join KEY OUT.png TABLE[@RUNG] [TABLE[@RUNG] ...]
                          the verdict against KEY (tune_ladder.png's drawing) from the tuned tables
                          of the sweeps' summary.md files (as shipped under configs/sweeps/results/):
                          a ladder's rows under their '### KEY = RUNG' headings, a single-rung
                          sweep's named by @RUNG; a later table's row replaces an earlier one's at
                          the same arm and rung. The numbers are the tables' as printed. Beside
                          it, OUT_rates.png: the value each arm selected against KEY (baseline
                          included, log-log), the joined transfer audit, marked where a value is
                          the grid's edge, carried from another rung, or from an arm that learned
                          nothing.
Coordinate check (`normlab coordcheck` calls it; src/train/README.md, "Coordinate check"):
    scripts/plot.py --coord DIR/coord.json  draws DIR/coord_check.png (and DIR/coord_rate_split.png where
                          coord.json holds rate splits): a row per check, a column per
                          drawn t (1, 2, the middle, the last), mean |x| against size, log-log, a line
                          per module kind with coord.json's slope in the legend
Sweep (from the sweep summary, runs/*/point.json, runs/*/metrics.jsonl):
    loss_curves.png     every run's train loss (lightly smoothed) and val loss (markers), one colour
                        per value of the group-by axis, seeds of a point in the same colour
    final_vs_lr.png     final train loss and best val loss against optim.lr (log x), a line per
                        layout (or per the other axes) through the summary's seed means, bars =
                        its std, every seed a dot; only when optim.lr is an axis
    final_vs_depth.png  the same against model.n_layers; only when model.n_layers is an axis
  When an axis takes non-numeric values (a layout or norm ablation; true/false): its values are the
  categories (the --group-by axis when that one is categorical, else the first such axis), the other
  axes form groups within each category:
    best_val_compare.png   best val loss per category and group: the summary's seed mean with a bar
                           over the seeds' min..max, every seed a dot, seeds without a finite value
                           as x at the top; below it, when available, the spike score and the final
                           eff_rank in the same layout
    grad_profile_step0.png per-block gradient norm of each run's first logged update (step 0)
                           against block index, log y, every seed a line (Xiong et al. 2020, Fig. 3)
    block_cos_profile.png  layers.block_cos of each run's last diagnostic step against block index,
                           every seed a line; only when the runs log block_cos
  A tuned sweep (tune:, configs/sweeps/README.md) also gets, from the summary's tune.arms[]:
    tune_basin.png      m(v), the mean metric over the search seeds, against the tuned value (log x),
                        one line per arm, the selected value v* starred, l0 and the sensitivity
                        in the legend; on a ladder tune_basin_<key>=<rung>.png per searched rung
    tune_forest.png     each arm's confirm-run difference to the baseline arm, Delta with its 95 %
                        interval (the deciding test's: Welch or paired), a vertical line at 0, the
                        margin shaded; verdict, Delta, interval, p_adj (and mde beside a tie) in a
                        column to the right, with the digits the interval supports; an arm that
                        learned nothing (at the unigram entropy) is an arrow at the edge; a panel
                        per rung
    tune_ladder.png     ladders only: the verdict against size, each arm's Delta with its interval
                        against the ladder's value (log x), filled where better / worse
    tune_transfer.png   ladders searched or fitted at two or more rungs: per arm m(v) against v, a
                        line per searched rung (a fitted rung that ran no search: its confirm
                        seeds' means over the fit's bracket, dashed), v* starred and the fitted optimum (tune.fit) dashed with its interval;
                        and each arm's optimum against the ladder's value (log-log) with the
                        summary's slopes
    tune_fit.png        a tuned sweep without a ladder, with tune.fit: quadratic: per arm the confirm
                        seeds' means over the fit's bracket and the fitted optimum (the summary's) a
                        vertical line (dotted at the bracket's end), the search m(v) faint;
                        beside it each arm's fitted optimum with its 95 % bootstrap interval, the
                        baseline's interval shaded
    tune_profiles.png   per-block diagnostics of the confirm runs at the last rung (the deepest on a
                        depth ladder), each arm at its selected value: the gradient norm of every
                        block at the first logged update and at the last diagnostic step, and
                        layers.block_cos at the last; every confirm seed a line;
                        a tuned sweep gets this in place of grad_profile_step0.png and
                        block_cos_profile.png (one line per search run there: unreadable)
Diverged or failed runs are drawn hollow, or as x markers pinned to the top of the axes when they
have no finite value or are off the scale (with a note), so they do not stretch the y scale.

Parts (scripts/plotlib/): read.py reads runs and sweeps (no matplotlib), run_figures.py holds
RUN_FIGURES and sweep_figures.py SWEEP_FIGURES, the tables of (file name, function, what it
needs), coord_figures.py the coordinate check's figure, draw.py what the figures share; this file
is the command line.

Environment: matplotlib (Agg backend, headless) and numpy. When they are missing the script
re-execs itself under /usr/bin/python3; if they are still missing it installs nothing: it prints the
command that does (scripts/setup.sh --plot) and exits 1.
"""

import argparse
import importlib.util
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
SCRIPT = os.path.abspath(__file__)
SCRIPTS_DIR = os.path.dirname(SCRIPT)
REPO_ROOT = os.path.dirname(SCRIPTS_DIR)
if SCRIPTS_DIR not in sys.path:
    sys.path.insert(0, SCRIPTS_DIR)

from plotlib import read  # noqa: E402  (standard library only; the figures import matplotlib when drawing)


# ----------------------------------------------------------------------------------------------
# environment: matplotlib + numpy, headless
# ----------------------------------------------------------------------------------------------

def _have_modules():
    return all(importlib.util.find_spec(m) is not None for m in ("matplotlib", "numpy"))


def _reexec(python, env_updates):
    os.environ.update(env_updates)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [python, SCRIPT] + sys.argv[1:])


def install_hint(flag):
    """The command that installs an optional part: scripts/setup.sh, relative to the working
    directory when that is the repository root."""
    setup = os.path.join(REPO_ROOT, "scripts", "setup.sh")
    if os.path.realpath(os.getcwd()) == os.path.realpath(REPO_ROOT):
        setup = os.path.join("scripts", "setup.sh")
    return "%s %s" % (setup, flag)


def ensure_environment():
    os.environ.setdefault("MPLBACKEND", "Agg")
    if _have_modules():
        return
    same = os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON)
    if not same and os.path.exists(SYSTEM_PYTHON) and not os.environ.get("NORMLAB_PLOT_SYSPY"):
        _reexec(SYSTEM_PYTHON, {"NORMLAB_PLOT_SYSPY": "1"})
    missing = [m for m in ("matplotlib", "numpy") if importlib.util.find_spec(m) is None]
    read.note("needs %s, which %s cannot import; install with: %s"
             % (" and ".join(missing), sys.executable, install_hint("--plot")))
    sys.exit(1)


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="plot.py", description="PNG plots of a NormLab run or sweep directory. "
                                 "Derives no number: every number comes from `normlab report --json` or the "
                                 "sweep summary.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Run: loss.png grad_heatmap.png grad_profile.png layers.png, and when "
                                        "logged act_max.png attn_sink.png block_cos.png eff_rank.png tasks.png layers_<series>.png "
                                        "grad_noise_scale.png qk_clip.png depth_weights.png autopsy_step_<N>.png; "
                                        "sweep: loss_curves.png final_vs_lr.png final_vs_depth.png, and with a "
                                        "categorical axis best_val_compare.png grad_profile_step0.png "
                                        "block_cos_profile.png. The head of scripts/plot.py says what each shows.")
    ap.add_argument("dir", help="run directory (metrics.jsonl) or sweep directory (sweep.yaml, summary.csv, runs/)")
    ap.add_argument("--group-by", default=None, metavar="KEY", help="sweep axis to colour loss curves by")
    ap.add_argument("--out", default=None, metavar="OUTDIR", help="output folder (default DIR/plots)")
    ap.add_argument("--runs", action="store_true", help="sweep: also plot every run")
    ap.add_argument("--normlab", default=None, metavar="PATH",
                    help="the normlab binary whose `report --json` gives every derived number "
                         "(default: $NORMLAB_BINARY, else build/normlab in the repository)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.dir):
        ap.error("%r is not a directory" % args.dir)
    return args


def join_ladder(argv):
    """--join KEY OUT.png TABLE[@RUNG] ...: the verdict-against-size figure of rungs that ran as
    separate sweeps, and beside it OUT_rates.png (the values the arms selected), from their
    summary.md tables (a ladder's under its '### KEY = RUNG' headings; a single-rung sweep's named
    by @RUNG); a later table's row replaces an earlier one's at the same arm and rung."""
    if len(argv) < 3:
        print("plot.py: usage: plot.py --join KEY OUT.png TABLE[@RUNG] [TABLE[@RUNG] ...]", file=sys.stderr)
        return 2
    key, out, tables = argv[0], argv[1], []
    for spec in argv[2:]:
        path, _, rung = spec.rpartition("@") if "@" in os.path.basename(spec) else (spec, "", "")
        if not os.path.isfile(path):
            print("plot.py: --join: %s: no such file (expected a sweep's summary.md)" % path, file=sys.stderr)
            return 2
        try:
            rows = read.read_tuned_md(path, key, rung or None)
        except read.TableError as e:
            print("plot.py: --join: %s" % e, file=sys.stderr)
            return 2
        if not rows:
            print("plot.py: --join: %s: no tuned table%s (expected the '| arm | selected ...' rows of a "
                  "tuned sweep's summary.md)" % (path, " at %s = %s" % (key, rung) if rung else ""), file=sys.stderr)
            return 2
        tables.append((os.path.basename(path), rows))
    ensure_environment()
    from plotlib.sweep_figures import fig_joined_ladder, fig_joined_rates
    stem, ext = os.path.splitext(out)
    ok = fig_joined_ladder(tables, key, out)
    ok = fig_joined_rates(tables, key, stem + "_rates" + (ext or ".png")) and ok
    return 0 if ok else 1


def main(argv):
    if len(argv) == 2 and argv[0] == "--autopsy":  # normlab replay: the PNG beside the autopsy
        ensure_environment()
        from plotlib.run_figures import draw_autopsy
        draw_autopsy(argv[1], argv[1][:-len(".json")] + ".png")
        return 0
    if len(argv) == 2 and argv[0] == "--coord":  # normlab coordcheck: coord_check.png beside coord.json
        ensure_environment()
        from plotlib.coord_figures import coord_png_path, draw_coord, draw_rate_split, rate_split_png_path
        draw_coord(argv[1], coord_png_path(argv[1]))
        draw_rate_split(argv[1], rate_split_png_path(argv[1]))
        return 0
    if argv and argv[0] == "--join":  # the verdict against size from several sweeps' summary.md
        return join_ladder(argv[1:])
    args = parse_args(argv)
    read.NORMLAB["path"] = args.normlab
    kind = read.kind_of(args.dir)
    if kind is None:
        print("plot.py: %s is neither a run directory (metrics.jsonl) nor a sweep directory "
              "(sweep.yaml, summary.csv or runs/*/point.json)" % args.dir, file=sys.stderr)
        return 2
    ensure_environment()
    outdir = args.out or os.path.join(args.dir, "plots")
    if kind == "run":
        from plotlib.run_figures import plot_run
        if args.group_by:
            read.note("--group-by applies to sweeps only; ignored")
        written = plot_run(read.Run(args.dir), outdir)
    else:
        from plotlib.sweep_figures import plot_sweep
        written = plot_sweep(read.Sweep(args.dir), args.group_by, outdir, args.runs)
    if not written:
        read.note("nothing plotted")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
