#!/usr/bin/python3
"""Plots for NormLab runs and sweeps: PNGs a newcomer can read, written next to the data.

    scripts/plot.py DIR [--group-by KEY] [--out OUTDIR] [--runs] [--normlab PATH]

    DIR              a run directory (holds metrics.jsonl) or a sweep directory (holds summary.csv
                     or runs/*/point.json, see `normlab sweep`)
    --group-by KEY   sweep only: the axis whose values get one colour each in the overlaid loss
                     curves (full dotted key such as model.layout, or its short name `layout`);
                     default: the first axis of summary.csv that takes more than one value
    --out OUTDIR     where the PNGs go (default: DIR/plots/)
    --runs           sweep only: also write every run's own plots (OUTDIR/runs/<name>/)
    --normlab PATH   the normlab binary (default: $NORMLAB_BINARY, else build/normlab in the
                     repository)

Each file written is printed on stdout, one path a line.

Run (from metrics.jsonl, config.yaml):
    loss.png          train and val loss against update step, the entropy floor, spikes marked,
                      bits per byte on the right axis when eval records carry val_bpb;
                      a lower panel with the global gradient norm and its spikes
    grad_heatmap.png  per-block gradient norm (layers.grad_norm) over steps, log colour scale
    grad_profile.png  per-block gradient norm at the first, ~25%, 50% and last logged steps
    layers.png        residual-stream RMS (act_rms) and attention max logit / entropy per block
  Only when the run logs the series (src/metrics/README.md; older runs simply lack these files):
    act_max.png           max |x| of the residual stream per position over steps (log), and against
                          depth next to act_rms at a few steps (massive activations)
    attn_sink.png         attention probability on position 0 per block over steps, with the level
                          of uniform causal attention
    block_cos.png         cos(stream entering, stream leaving) per block: depth x step heatmap
                          (near 1 = the block barely changes the stream)
    layers_<name>.png     every other layers.<name> series (layers.act_kurtosis, and any statistic
                          added later): one line per block or stream position over steps
    eff_rank.png          val loss and the effective rank of the final representation per eval
    grad_noise_scale.png  the simple gradient noise scale B_simple over diagnostic steps
    qk_clip.png           number of attention heads QK-Clip clipped per logged step
    autopsy_step_<N>.png  each step autopsy `normlab replay` wrote (spikes/step_<N>.autopsy.json): the
                          loss of every row at N against N-1, per-block gradient norms and update
                          ratios, per-head max logit and entropy
    scripts/plot.py --autopsy FILE.autopsy.json  draws one autopsy to FILE.autopsy.png
Sweep (from summary.csv, runs/*/point.json, runs/*/metrics.jsonl):
    loss_curves.png     every run's train loss (lightly smoothed) and val loss (markers), one colour
                        per value of the group-by axis, seeds of a point in the same colour
    final_vs_lr.png     final train loss and best val loss against optim.lr (log x), a line per
                        layout (or per the other axes); only when optim.lr is an axis
    final_vs_depth.png  the same against model.n_layers; only when model.n_layers is an axis
  When an axis takes non-numeric values (a layout or norm ablation; true/false): its values are the
  categories (the --group-by axis when that one is categorical, else the first such axis), the other
  axes form groups within each category:
    best_val_compare.png   best val loss per category and group: mean over seeds with a min..max bar,
                           every seed a dot, diverged/failed seeds as x at the top; below it, when
                           available, the spike score and the final eff_rank in the same layout
    grad_profile_step0.png per-block gradient norm of each point's first logged update (step 0)
                           against block index, log y, seeds averaged (Xiong et al. 2020, Fig. 3)
    block_cos_profile.png  layers.block_cos of each point's last diagnostic step against block index,
                           seeds averaged; only when the runs log block_cos
Diverged or failed runs are drawn as x markers pinned to the top of the axes (with a note), so they
do not stretch the y scale.

This script derives no number from the records: the entropy floor, the spike score, divergence,
final train loss, best and final val loss and the final eff_rank of a run come from
`normlab report --json RUN` (src/metrics/records.cpp defines each once), a sweep's from its
summary.csv (the same numbers), falling back to `normlab report --json` per run where a cell is
empty. metrics.jsonl is read only for the series drawn over steps and the spike records marked.

Environment: matplotlib (Agg backend, headless) and numpy. When they are missing the script
re-execs itself under /usr/bin/python3; if they are still missing it installs nothing: it prints the
command that does (scripts/setup.sh --plot) and exits 1.
Reads the JSON that NormLab writes (non-finite numbers as null) and also NaN / Infinity literals;
a truncated last line (a run still writing) is ignored.
"""

import argparse
import csv
import glob
import importlib.util
import json
import math
import os
import sys
import textwrap

SYSTEM_PYTHON = "/usr/bin/python3"
SCRIPT = os.path.abspath(__file__)
REPO_ROOT = os.path.dirname(os.path.dirname(SCRIPT))
DPI = 100


def _log(msg):
    print("plot.py: " + msg, file=sys.stderr, flush=True)


NORMLAB = {"path": None, "warned": False}


def normlab_binary():
    """--normlab PATH, else $NORMLAB_BINARY, else build/normlab in the repository."""
    return NORMLAB["path"] or os.environ.get("NORMLAB_BINARY") or os.path.join(REPO_ROOT, "build", "normlab")


def normlab_report(run_dir):
    """`normlab report --json RUN`: the run's derived numbers (src/metrics/records.cpp), or {} with
    a note on stderr when the binary is missing or fails (the plots then go without them)."""
    import subprocess
    binary = normlab_binary()
    try:
        out = subprocess.run([binary, "report", "--json", run_dir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, check=False)
    except OSError as e:
        if not NORMLAB["warned"]:
            _log("cannot run %s (%s): no spike score, divergence or best/final val loss from the records; "
                 "pass --normlab PATH or set NORMLAB_BINARY" % (binary, e))
            NORMLAB["warned"] = True
        return {}
    if out.returncode != 0:
        _log("%s report --json %s failed: %s" % (binary, run_dir, out.stderr.strip()[-500:]))
        return {}
    try:
        j = json.loads(out.stdout)
    except ValueError:
        _log("%s report --json %s: not JSON" % (binary, run_dir))
        return {}
    return j if isinstance(j, dict) else {}


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
    _log("needs %s, which %s cannot import; install with: %s"
         % (" and ".join(missing), sys.executable, install_hint("--plot")))
    sys.exit(1)


# ----------------------------------------------------------------------------------------------
# reading: metrics.jsonl, config.yaml, floor.json, summary.csv, point.json (standard library only),
# and `normlab report --json` for every derived number
# ----------------------------------------------------------------------------------------------

def num(x):
    """A JSON/CSV value as a float; None, '', text and booleans-as-text become nan."""
    if x is None or isinstance(x, bool):
        return float("nan")
    if isinstance(x, (int, float)):
        return float(x)
    try:
        return float(str(x).strip())
    except ValueError:
        return float("nan")


def finite(x):
    return isinstance(x, float) and math.isfinite(x)


def vec(x):
    """A JSON list of numbers (nulls allowed) as a list of floats, or None."""
    if not isinstance(x, list) or not x:
        return None
    return [num(v) for v in x]


def read_metrics(path):
    """Records of metrics.jsonl by kind; a later record for the same (kind, step) replaces an
    earlier one (a resumed run repeats steps). Unparseable lines are skipped."""
    train, evals, spikes = {}, {}, []
    bad = 0
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except OSError as e:
        _log("cannot read %s: %s" % (path, e))
        lines = []
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            r = json.loads(line)  # accepts NaN / Infinity / -Infinity literals too
        except ValueError:
            if i < len(lines) - 2:  # not the (possibly half-written) last line
                bad += 1
            continue
        if not isinstance(r, dict):
            continue
        kind, step = r.get("kind"), r.get("step")
        if not isinstance(step, (int, float)) or isinstance(step, bool):
            continue
        step = int(step)
        if kind == "train":
            train[step] = r
        elif kind == "eval":
            evals[step] = r
        elif kind == "spike":
            spikes.append(r)
    if bad:
        _log("%s: skipped %d unreadable line(s)" % (path, bad))
    return ([train[s] for s in sorted(train)], [evals[s] for s in sorted(evals)],
            sorted(spikes, key=lambda r: r.get("step", 0)))


def read_simple_yaml(path):
    """Flattened scalars of a block-style YAML file (what normlab writes as config.yaml):
    {'model.layout': 'pre', 'optim.lr': '0.002', ...}. Uses PyYAML when present."""
    out = {}
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return out
    try:
        import yaml  # optional

        def walk(node, prefix):
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, prefix + [str(k)])
            elif not isinstance(node, list):
                out[".".join(prefix)] = "" if node is None else (
                    str(node).lower() if isinstance(node, bool) else str(node))
        walk(yaml.safe_load(text), [])
        return out
    except Exception:
        out.clear()
    stack = []  # (indent, key)
    for raw in text.split("\n"):
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith(("#", "-", "---")):
            continue
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if ":" not in body:
            continue
        key, _, val = body.partition(":")
        key, val = key.strip().strip("'\""), val.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path_keys = [k for _, k in stack] + [key]
        if val == "":
            stack.append((indent, key))
        elif val.startswith("{") and val.endswith("}"):
            for item in val[1:-1].split(","):
                if ":" in item:
                    k, _, v = item.partition(":")
                    out[".".join(path_keys + [k.strip()])] = v.strip().strip("'\"")
        else:
            out[".".join(path_keys)] = val.strip("'\"")
    return out


def find_floor(run_dir, cfg):
    """(train floor, val floor) from data/.../floor.json next to the run's data, or (nan, nan)."""
    cands = []
    for key in ("data.val", "data.train"):
        p = cfg.get(key)
        if p:
            d = os.path.dirname(p)
            if os.path.isabs(d):
                cands.append(os.path.join(d, "floor.json"))
            else:
                cands += [os.path.join(os.getcwd(), d, "floor.json"), os.path.join(REPO_ROOT, d, "floor.json")]
    if not cfg:
        cands.append(os.path.join(REPO_ROOT, "data", "toy", "floor.json"))
    for c in cands:
        try:
            with open(c, "r", encoding="utf-8") as f:
                j = json.load(f)
            return (num(j.get("train", {}).get("entropy_floor")), num(j.get("val", {}).get("entropy_floor")))
        except (OSError, ValueError, AttributeError):
            continue
    return (float("nan"), float("nan"))


class Run:
    """One run directory: its records, config and derived numbers."""

    def __init__(self, path, label=None):
        self.path = os.path.abspath(path)
        self.label = label or os.path.basename(self.path.rstrip("/"))
        self.train, self.evals, self.spike_records = read_metrics(os.path.join(self.path, "metrics.jsonl"))
        self.cfg = read_simple_yaml(os.path.join(self.path, "config.yaml"))
        self._report = None
        self.floor_train, self.floor_val = find_floor(self.path, self.cfg)
        # the floor the run's eval records carry (`normlab report`'s entropy_floor) comes first
        fl = self.derived("entropy_floor")
        if finite(fl):
            self.floor_val = fl
            if not finite(self.floor_train):
                self.floor_train = fl

    @property
    def report(self):
        """`normlab report --json` of this run (run once, on first use)."""
        if self._report is None:
            self._report = normlab_report(self.path)
        return self._report

    def derived(self, key):
        """A derived number of the run (normlab report --json: spike_score, diverged,
        final_train_loss, best_val_loss, final_val_loss, eff_rank, entropy_floor ...), nan when absent."""
        return num(self.report.get(key))

    def describe(self):
        c = self.cfg
        bits = []
        if c.get("model.layout"):
            bits.append(c["model.layout"] + ("/" + c["model.norm.type"] if c.get("model.norm.type") else ""))
        if c.get("model.n_layers"):
            bits.append("%s blocks" % c["model.n_layers"])
        if c.get("model.d_model"):
            bits.append("d=%s" % c["model.d_model"])
        if c.get("optim.lr"):
            bits.append("lr %s" % fmt_num(num(c["optim.lr"])))
        if c.get("model.qk_norm") in ("true", "True"):
            bits.append("QK-norm")
        if c.get("model.residual.type") not in (None, "add"):
            bits.append("residual " + c["model.residual.type"])
        if c.get("model.value_residual") not in (None, "none"):
            bits.append("value residual " + c["model.value_residual"])
        return ", ".join(bits)

    def series(self, key, records=None):
        """(steps, values) of a scalar train-record key; values nan where absent/non-finite."""
        recs = self.train if records is None else records
        return [r["step"] for r in recs], [num(r.get(key)) for r in recs]

    def layer_matrix(self, key):
        """(steps, rows) of records that carry layers.<key>, rows padded with nan to one width."""
        steps, rows = [], []
        for r in self.train:
            v = vec((r.get("layers") or {}).get(key)) if isinstance(r.get("layers"), dict) else None
            if v is not None:
                steps.append(r["step"])
                rows.append(v)
        if not rows:
            return [], []
        w = max(len(v) for v in rows)
        return steps, [v + [float("nan")] * (w - len(v)) for v in rows]

    def has_key(self, key, records=None):
        """True when some record carries `key` (even as null): the run logs that quantity."""
        return any(key in r for r in (self.train if records is None else records))

    def last_layer_row(self, key):
        """(step, row) of the last train record carrying layers.<key>, or (None, None)."""
        steps, rows = self.layer_matrix(key)
        return (steps[-1], rows[-1]) if steps else (None, None)

    def first_layer_row(self, key):
        """(step, row) of the first train record carrying layers.<key> (step 0 when it is logged)."""
        steps, rows = self.layer_matrix(key)
        return (steps[0], rows[0]) if steps else (None, None)

    def nonfinite_steps(self):
        return [r["step"] for r in self.train
                if r.get("nonfinite") is True or not finite(num(r.get("loss")))]

    def spike_marks(self):
        """{metric: [(step, value, z)]}: the run's spike records, as the detector wrote them."""
        marks = {"loss": {}, "grad_norm": {}}
        for s in self.spike_records:
            m = s.get("metric")
            if m in marks:
                marks[m][int(s["step"])] = (num(s.get("value")), num(s.get("z")))
        return {m: sorted((s, v, z) for s, (v, z) in d.items()) for m, d in marks.items()}


def fmt_num(x):
    return "%g" % x if finite(x) else "n/a"


# ----------------------------------------------------------------------------------------------
# plotting helpers
# ----------------------------------------------------------------------------------------------

def mpl():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "figure.titlesize": 12,
                         "legend.fontsize": 8.5, "axes.grid": True, "grid.alpha": 0.3,
                         "savefig.dpi": DPI})
    return plt


def save(fig, path):
    plt = mpl()
    from matplotlib.ticker import MaxNLocator
    for ax in fig.axes:  # update steps are whole numbers
        if ax.get_xlabel().startswith("update step") and ax.get_xscale() == "linear":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=DPI)
    try:  # a 256-colour palette keeps the PNGs small (a third of the size) with no visible change
        from PIL import Image
        with Image.open(path) as im:
            q = im.convert("RGB").quantize(colors=256)
        q.save(path, optimize=True)
    except Exception:
        pass
    plt.close(fig)
    print(path, flush=True)
    return path


def readable_log(axis_obj, lo=None, hi=None, dense=True):
    """Log scale with plain-number tick labels (1, 2, 5 or denser when the range is narrow)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    if lo is None or hi is None:
        lo, hi = axis_obj.get_view_interval()
    ratio = hi / lo if lo > 0 else float("inf")
    if dense and ratio < 12:
        subs = (1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)
    elif ratio < 2000:
        subs = (1.0, 2.0, 5.0)
    else:
        subs = (1.0,)
    axis_obj.set_major_locator(LogLocator(base=10, subs=subs, numticks=30))
    axis_obj.set_major_formatter(FuncFormatter(lambda v, _: "%g" % float("%.2g" % v)))
    axis_obj.set_minor_formatter(NullFormatter())


def set_logy(ax):
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    readable_log(ax.yaxis, lo, hi)


def layer_colors(n, cmap="viridis"):
    plt = mpl()
    cm = plt.get_cmap(cmap)
    if n <= 1:
        return [cm(0.1)]
    return [cm(0.05 + 0.85 * i / (n - 1)) for i in range(n)]


def per_layer_lines(ax, steps, rows, labels, title, ylabel, logy=False, colorbar_label="block index"):
    """One line per column of rows (a block or stream position) against step; legend when few,
    colour bar when many."""
    import numpy as np
    plt = mpl()
    a = np.array(rows, dtype=float)
    n = a.shape[1]
    cols = layer_colors(n)
    for j in range(n):
        ax.plot(steps, a[:, j], color=cols[j], lw=1.3, label=labels[j] if labels else None)
    ax.set_title(title)
    ax.set_xlabel("update step")
    ax.set_ylabel(ylabel)
    fin = a[np.isfinite(a)]
    pos = fin[fin > 0]
    if logy and pos.size == fin.size and pos.size and pos.max() / pos.min() > 20:
        set_logy(ax)
    elif logy and fin.size and np.abs(fin).max() > 500:  # huge range that crosses zero
        from matplotlib.ticker import FuncFormatter
        ax.set_yscale("symlog", linthresh=10)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        ax.set_ylabel(ylabel + " (linear below 10, log above)")
    if n <= 9:
        ax.legend(loc="best", ncol=1 if n <= 5 else 2, framealpha=0.8)
    else:
        from matplotlib.colors import ListedColormap
        sm = plt.cm.ScalarMappable(cmap=ListedColormap(cols), norm=plt.Normalize(-0.5, n - 0.5))
        cb = ax.figure.colorbar(sm, ax=ax, pad=0.01)
        cb.set_label(colorbar_label)


def profile_steps(steps):
    """Indices of the first, ~25%, 50% and last of the given steps (distinct)."""
    if not steps:
        return []
    n = len(steps)
    idx = []
    for q in (0.0, 0.25, 0.5, 1.0):
        i = min(n - 1, int(round(q * (n - 1))))
        if i not in idx:
            idx.append(i)
    return idx


def step_edges(steps):
    """Cell edges for a heatmap column per logged step (steps need not be evenly spaced)."""
    import numpy as np
    s = np.array(steps, dtype=float)
    if len(s) > 1:
        mids = (s[1:] + s[:-1]) / 2
        return np.concatenate([[s[0] - (mids[0] - s[0])], mids, [s[-1] + (s[-1] - mids[-1])]])
    return np.array([s[0] - 0.5, s[0] + 0.5])


def clip_top(ax, xs, ys, top, color, marker="x", size=60, label=None):
    """Draws points above `top` (or non-finite) as markers pinned near the top of the axes."""
    import matplotlib.transforms as mtransforms
    if not xs:
        return
    tr = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    ax.scatter(xs, [0.97] * len(xs), marker=marker, s=size, color=color, transform=tr, zorder=5,
               clip_on=False, label=label, linewidths=2)


# ----------------------------------------------------------------------------------------------
# run plots
# ----------------------------------------------------------------------------------------------

def plot_run(run, outdir):
    import numpy as np
    plt = mpl()
    written = []
    head = "%s%s" % (run.label, (" (" + run.describe() + ")") if run.describe() else "")
    if not run.train and not run.evals:
        _log("%s: no train or eval records in metrics.jsonl; nothing to plot" % run.path)
        return written

    # ---- (1) loss curve, with a grad-norm panel ------------------------------------------------
    fig, (ax, axg) = plt.subplots(2, 1, figsize=(9, 6.4), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.3]})
    st, lo = run.series("loss")
    st, lo = np.array(st, dtype=float), np.array(lo, dtype=float)
    ok = np.isfinite(lo)
    es = np.array([e["step"] for e in run.evals], dtype=float)
    ev = np.array([num(e.get("val_loss")) for e in run.evals], dtype=float)
    eok = np.isfinite(ev)
    allv = np.concatenate([lo[ok], ev[eok]])
    floor = run.floor_val
    if ok.any():
        ax.plot(st[ok], lo[ok], color="C0", lw=1.2, label="train loss (batch)")
    if eok.any():
        ax.plot(es[eok], ev[eok], "o-", color="C1", ms=5, lw=1.2, label="val loss")
    if allv.size:
        lo_lim = float(allv.min())
        if finite(floor):
            lo_lim = min(lo_lim, floor)
        # the y range is set by the sane part of the run: up to the first loss (random init)
        ref = [float(x) for x in lo[ok][:3]] + [float(x) for x in ev[eok][:1]]
        hi_lim = max(ref) if ref else float(allv.max())
        hi_lim = max(hi_lim, float(np.percentile(allv, 90)))
        use_log = lo_lim > 0 and hi_lim / lo_lim > 2.5
        if use_log:
            ax.set_yscale("log")
            ax.set_ylim(lo_lim / 1.06, hi_lim * 1.15)
            readable_log(ax.yaxis, lo_lim / 1.06, hi_lim * 1.15)
        else:
            pad = 0.06 * (hi_lim - lo_lim if hi_lim > lo_lim else max(1.0, abs(hi_lim)))
            ax.set_ylim(lo_lim - pad, hi_lim + 2 * pad)
        top = ax.get_ylim()[1]
        off = [float(s) for s, v in zip(st[ok], lo[ok]) if v > top]
        if off:
            clip_top(ax, off, None, top, "C0", marker="^", size=30, label="train loss above the axis")
    if finite(floor):
        ax.axhline(floor, color="k", ls="--", lw=1, label="entropy floor (best possible val loss) %.3f" % floor)
    nf = run.nonfinite_steps()
    if nf:
        clip_top(ax, nf, None, None, "red", label="non-finite loss or grads (update skipped)")
    marks = run.spike_marks()
    if marks["loss"]:
        s = [m[0] for m in marks["loss"]]
        v = [m[1] if finite(m[1]) else float("nan") for m in marks["loss"]]
        ax.scatter(s, v, marker="v", s=70, facecolor="none", edgecolor="red", linewidths=1.6, zorder=6,
                   label="loss spike (z > threshold)")
    for m in marks["grad_norm"]:
        ax.axvline(m[0], color="purple", lw=0.8, alpha=0.35, zorder=0)
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(textwrap.fill("%s: loss" % head, 80))
    ax.legend(loc="best", framealpha=0.85)
    # Bits per byte on the right: val_bpb / val_loss is the same at every evaluation (the same
    # windows, the same bytes), so the loss axis reads as bits per byte of the validation text.
    ratios = [num(e.get("val_bpb")) / num(e.get("val_loss")) for e in run.evals
              if finite(num(e.get("val_bpb"))) and finite(num(e.get("val_loss"))) and num(e.get("val_loss")) > 0]
    if ratios:
        k = ratios[-1]
        sec = ax.secondary_yaxis("right", functions=(lambda y, k=k: y * k, lambda y, k=k: y / k))
        sec.set_ylabel("val bits per byte (eval records' val_bpb)")
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator
        lo_y, hi_y = ax.get_ylim()
        nice = [0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16]
        sec.yaxis.set_major_locator(FixedLocator([v for v in nice if lo_y * k <= v <= hi_y * k]))
        sec.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%.3g" % v))
        sec.yaxis.set_minor_locator(NullLocator())
        sec.yaxis.set_minor_formatter(NullFormatter())

    gs, gv = run.series("grad_norm")
    gs, gv = np.array(gs, dtype=float), np.array(gv, dtype=float)
    gok = np.isfinite(gv) & (gv > 0)
    if gok.any():
        axg.plot(gs[gok], gv[gok], color="C2", lw=1.0, label="global grad norm (before clipping)")
        axg.set_yscale("log")
        vals = list(gv[gok]) + [m[1] for m in marks["grad_norm"] if finite(m[1]) and m[1] > 0]
        readable_log(axg.yaxis, min(vals), max(vals), dense=False)
    if marks["grad_norm"]:
        s = [m[0] for m in marks["grad_norm"]]
        v = [m[1] for m in marks["grad_norm"]]
        axg.scatter(s, v, marker="v", s=55, facecolor="none", edgecolor="purple", linewidths=1.5, zorder=6,
                    label="grad-norm spike (also a faint line above)")
    axg.set_xlabel("update step")
    axg.set_ylabel("grad norm")
    if gok.any() or marks["grad_norm"]:
        axg.legend(loc="upper right", framealpha=0.85)
    fig.tight_layout()
    written.append(save(fig, os.path.join(outdir, "loss.png")))

    # ---- (2) heatmap of per-block gradient norm -----------------------------------------------
    steps, rows = run.layer_matrix("grad_norm")
    if steps:
        from matplotlib.colors import LogNorm
        a = np.array(rows, dtype=float).T  # [L, records]
        L = a.shape[0]
        a = np.where(np.isfinite(a) & (a > 0), a, np.nan)
        fig, ax = plt.subplots(figsize=(9, max(3.6, 2.7 + 0.18 * min(L, 24))))
        edges = step_edges(steps)
        yedges = np.arange(L + 1) - 0.5
        fin = a[np.isfinite(a)]
        ax.grid(False)
        if fin.size:
            norm = LogNorm(vmin=float(fin.min()), vmax=float(fin.max()) if fin.max() > fin.min() else float(fin.min()) * 1.01)
            mesh = ax.pcolormesh(edges, yedges, np.ma.masked_invalid(a), norm=norm, cmap="magma", shading="flat")
            cb = fig.colorbar(mesh, ax=ax, pad=0.01)
            cb.set_label("gradient norm of the block\n(L2, before clipping, log scale)")
            readable_log(cb.ax.yaxis, norm.vmin, norm.vmax)
        ax.set_ylim(-0.5, L - 0.5)
        if L <= 16:
            ax.set_yticks(range(L))
        ax.set_ylabel("block index\n(0 = bottom, next to embedding)")
        ax.set_xlabel("update step")
        ax.grid(False)
        ax.set_title(textwrap.fill("%s: per-block gradient norm over training" % head, 80))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "grad_heatmap.png")))

        # ---- (3) per-block gradient-norm profiles at a few steps -----------------------------
        fig, ax = plt.subplots(figsize=(9, 4.8))
        idx = profile_steps(steps)
        cols = layer_colors(len(idx), "plasma")
        allp = []
        for c, i in zip(cols, idx):
            prof = np.array(rows[i], dtype=float)
            ratio = prof[0] / prof[L - 1] if L > 1 and np.isfinite(prof[[0, L - 1]]).all() and prof[L - 1] > 0 else float("nan")
            lab = "step %d" % steps[i] + ("  (first/last block = %.2f)" % ratio if finite(float(ratio)) else "")
            ax.plot(range(L), prof, "o-", color=c, lw=1.6, ms=5, label=lab)
            allp += [v for v in prof if np.isfinite(v) and v > 0]
        if allp and max(allp) / min(allp) > 8:
            ax.set_yscale("log")
            readable_log(ax.yaxis, min(allp), max(allp))
        ax.set_xticks(range(L) if L <= 24 else range(0, L, max(1, L // 12)))
        ax.set_xlabel("block index (0 = first block after the embedding)")
        ax.set_ylabel("gradient norm of the block (L2)")
        ax.set_title(textwrap.fill("%s: per-block gradient-norm profile" % head, 80))
        ax.legend(loc="best", framealpha=0.85, title="update step")
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "grad_profile.png")))

    # ---- (4) residual RMS, attention max logit and entropy -------------------------------------
    rs, rr = run.layer_matrix("act_rms")
    ms_, mr = run.layer_matrix("attn_logit_max")
    hs, hr = run.layer_matrix("attn_entropy")
    if rs or ms_ or hs:
        fig, axs = plt.subplots(2, 2, figsize=(9.6, 7.4))
        (a1, a2), (a3, a4) = axs
        if rs:
            n = len(rr[0])
            labs = ["entering block %d" % j for j in range(n - 1)] + ["after last block"]
            per_layer_lines(a1, rs, rr, labs, "residual-stream RMS over training",
                            "RMS of the residual stream", logy=True, colorbar_label="stream position (block entered)")
            idx = profile_steps(rs)
            cols = layer_colors(len(idx), "plasma")
            for c, i in zip(cols, idx):
                a2.plot(range(n), rr[i], "o-", color=c, lw=1.5, ms=4, label="step %d" % rs[i])
            a2.set_xticks(range(n) if n <= 25 else range(0, n, max(1, n // 12)))
            a2.set_xticklabels([str(j) for j in range(n - 1)] + ["out"] if n <= 25 else None)
            a2.set_xlabel("position j: entering block j (out = after the last block)")
            a2.set_ylabel("RMS of the residual stream")
            a2.set_title("residual-stream RMS by depth")
            vals = [v for row in rr for v in row if finite(v) and v > 0]
            if vals and max(vals) / min(vals) > 20:
                a2.set_yscale("log")
                readable_log(a2.yaxis, min(vals), max(vals))
            a2.legend(title="update step", framealpha=0.85)
        else:
            for a in (a1, a2):
                a.text(0.5, 0.5, "no act_rms in metrics.jsonl", ha="center", va="center", transform=a.transAxes)
        if ms_:
            per_layer_lines(a3, ms_, mr, ["block %d" % j for j in range(len(mr[0]))],
                            "attention: max pre-softmax logit", "max attention logit", logy=True)
        else:
            a3.text(0.5, 0.5, "no attn_logit_max in metrics.jsonl", ha="center", va="center", transform=a3.transAxes)
        if hs:
            ctx = num(run.cfg.get("model.ctx"))
            per_layer_lines(a4, hs, hr, ["block %d" % j for j in range(len(hr[0]))],
                            "attention entropy (mean over heads and queries)", "entropy (nats)")
            if finite(ctx) and 1 < ctx < 1e6:
                # causal attention spread evenly: query i sees i+1 keys, so the mean entropy is
                # mean_i ln(i+1); the level every block starts from with small initial weights
                uni = sum(math.log(i + 1) for i in range(int(ctx))) / int(ctx)
                a4.axhline(uni, color="0.4", ls="--", lw=1)
                a4.text(0.01, uni, " uniform causal attention (T=%d): %.2f" % (ctx, uni), color="0.3", fontsize=8,
                        ha="left", va="bottom", transform=a4.get_yaxis_transform())
                a4.set_ylim(top=max(a4.get_ylim()[1], uni * 1.12))
            a4.axhline(0.1, color="red", ls=":", lw=1)
            a4.text(0.99, 0.1, " collapse warning (0.1 nats)", color="red", fontsize=8, ha="right", va="bottom",
                    transform=a4.get_yaxis_transform())
            a4.set_ylim(bottom=0)
        else:
            a4.text(0.5, 0.5, "no attn_entropy in metrics.jsonl", ha="center", va="center", transform=a4.transAxes)
        title = "%s: activations and attention per block (diagnostic steps only)" % head
        fig.suptitle(textwrap.fill(title, 95))  # long sweep run names would run off the figure
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "layers.png")))
    written += plot_run_extras(run, outdir, head)
    return written


def no_data_note(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.3")


def plot_run_extras(run, outdir, head):
    """The diagnostics a run logs only on full-diagnostics steps or only with some options
    (src/metrics/README.md): each figure is written only when its series is in metrics.jsonl, so an
    older run gets none of them."""
    import numpy as np
    plt = mpl()
    written = []

    # ---- massive activations: max |x| of the residual stream next to its RMS ---------------------
    xs, xr = run.layer_matrix("act_max")
    if xs and np.isfinite(np.array(xr, dtype=float)).any():
        rms = dict(zip(*run.layer_matrix("act_rms")))
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.4, 4.9))
        n = len(xr[0])
        labs = ["entering block %d" % j for j in range(n - 1)] + ["after last block"]
        per_layer_lines(a1, xs, xr, labs, "max |x| of the residual stream over training", "max |x|",
                        logy=True, colorbar_label="stream position (block entered)")
        idx = profile_steps(xs)
        cols = layer_colors(len(idx), "plasma")
        vals, ratio_note, has_rms = [], "", False
        for c, i in zip(cols, idx):
            mx = np.array(xr[i], dtype=float)
            a2.plot(range(n), mx, "o-", color=c, lw=1.6, ms=4, label="step %d" % xs[i])
            vals += [v for v in mx if np.isfinite(v) and v > 0]
            r = rms.get(xs[i])
            if r is not None:
                r = np.array(r[:n] + [float("nan")] * (n - len(r)), dtype=float)
                a2.plot(range(n), r, "--", color=c, lw=1.1, alpha=0.8)
                has_rms = True
                vals += [v for v in r if np.isfinite(v) and v > 0]
                q = mx / np.where(r > 0, r, np.nan)
                if i == idx[-1] and np.isfinite(q).any():
                    ratio_note = " (last step: max/RMS up to %.0f)" % np.nanmax(q)
        if vals and max(vals) / min(vals) > 8:
            a2.set_yscale("log")
            readable_log(a2.yaxis, min(vals), max(vals))
        a2.set_xticks(range(n) if n <= 25 else range(0, n, max(1, n // 12)))
        if n <= 25:
            a2.set_xticklabels([str(j) for j in range(n - 1)] + ["out"])
        a2.set_xlabel("position j: entering block j (out = after the last block)")
        a2.set_ylabel("|x| (solid: max, dashed: RMS)")
        a2.set_title(textwrap.fill("max |x| against RMS by depth" + ratio_note, 50))
        handles, _ = a2.get_legend_handles_labels()
        if has_rms:
            from matplotlib.lines import Line2D
            handles += [Line2D([], [], color="0.3", lw=1.6, marker="o", ms=4, label="max |x| (solid)"),
                        Line2D([], [], color="0.3", lw=1.1, ls="--", label="RMS (dashed)")]
        a2.legend(handles=handles, loc="best", framealpha=0.85, title="update step")
        fig.suptitle(textwrap.fill("%s: massive activations (diagnostic steps only)" % head, 95))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "act_max.png")))

    # ---- attention sinks: attention probability on position 0 -----------------------------------
    ks, kr = run.layer_matrix("attn_sink")
    if ks and np.isfinite(np.array(kr, dtype=float)).any():
        fig, ax = plt.subplots(figsize=(9, 4.8))
        per_layer_lines(ax, ks, kr, ["block %d" % j for j in range(len(kr[0]))],
                        textwrap.fill("%s: attention on position 0 (attention sink), diagnostic steps"
                                      % head, 80), "mean attention probability on position 0")
        ctx = num(run.cfg.get("model.ctx"))
        if finite(ctx) and 2 <= ctx < 1e6:
            # uniform causal attention gives query t a weight 1/(t+1) on position 0; averaged over
            # t = 1..T-1 that is (H_T - 1) / (T - 1), H_T the harmonic number
            T = int(ctx)
            uni = (sum(1.0 / k for k in range(1, T + 1)) - 1) / (T - 1)
            ax.axhline(uni, color="0.4", ls="--", lw=1)
            ax.text(0.01, uni, " uniform causal attention (T=%d): %.3f" % (T, uni), color="0.3", fontsize=8,
                    ha="left", va="bottom", transform=ax.get_yaxis_transform())
        fin = np.array(kr, dtype=float)
        fin = fin[np.isfinite(fin)]
        ax.set_ylim(0, 1.0 if fin.max() > 0.45 else max(0.05, float(fin.max()) * 1.25))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "attn_sink.png")))

    # ---- block_cos: depth x step heatmap ---------------------------------------------------------
    cs, cr = run.layer_matrix("block_cos")
    a = np.array(cr, dtype=float).T if cs else np.zeros((0, 0))
    if cs and np.isfinite(a).any():
        L = a.shape[0]
        fin = a[np.isfinite(a)]
        # cos is at most 1; the lower end follows the data (rounded down to 0.05) so that a run whose
        # blocks all sit at 0.97..1.0 is not one flat colour, and never below -1
        vmin = max(-1.0, min(0.95, math.floor(float(fin.min()) * 20) / 20))
        fig, ax = plt.subplots(figsize=(9, max(3.6, 2.7 + 0.18 * min(L, 24))))
        ax.grid(False)
        mesh = ax.pcolormesh(step_edges(cs), np.arange(L + 1) - 0.5, np.ma.masked_invalid(a), cmap="viridis",
                             vmin=vmin, vmax=1.0, shading="flat")
        cb = fig.colorbar(mesh, ax=ax, pad=0.01)
        cb.set_label("cos(stream entering, stream leaving)\n1 = the block barely changes the stream")
        ax.set_ylim(-0.5, L - 0.5)
        if L <= 16:
            ax.set_yticks(range(L))
        ax.set_ylabel("block index\n(0 = bottom, next to embedding)")
        ax.set_xlabel("update step")
        last = a[:, -1]
        note = ""
        if np.isfinite(last).any():
            note = " (last step: %d of %d blocks above 0.95)" % (int(np.sum(last > 0.95)), L)
        ax.set_title(textwrap.fill("%s: how much each block changes the residual stream%s" % (head, note), 80))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "block_cos.png")))

    # ---- effective rank of the final representation, with the validation loss --------------------
    es = [e["step"] for e in run.evals if finite(num(e.get("eff_rank")))]
    er = [num(e.get("eff_rank")) for e in run.evals if finite(num(e.get("eff_rank")))]
    if es:
        fig, (ax, axr) = plt.subplots(2, 1, figsize=(9, 5.8), sharex=True,
                                      gridspec_kw={"height_ratios": [1.2, 1]})
        vs = [e["step"] for e in run.evals if finite(num(e.get("val_loss")))]
        vv = [num(e.get("val_loss")) for e in run.evals if finite(num(e.get("val_loss")))]
        if vs:
            ax.plot(vs, vv, "o-", color="C1", ms=5, lw=1.2, label="val loss")
            if finite(run.floor_val) and run.floor_val >= min(vv) - 0.6 * max(max(vv) - min(vv), 0.05):
                ax.axhline(run.floor_val, color="k", ls="--", lw=1, label="entropy floor %.3f" % run.floor_val)
            ax.legend(loc="best", framealpha=0.85)
        else:
            no_data_note(ax, "no finite val_loss in metrics.jsonl")
        ax.set_ylabel("val loss (nats/token)")
        ax.set_title(textwrap.fill("%s: validation loss and effective rank of the final representation" % head, 80))
        axr.plot(es, er, "s-", color="C4", ms=5, lw=1.4, label="eff_rank")
        d = num(run.cfg.get("model.d_model"))
        axr.set_ylabel("effective rank\nexp(H(s / sum s))")
        axr.set_xlabel("update step")
        note = ("of at most d_model = %d; " % d) if finite(d) else ""
        axr.text(0.99, 0.04, note + "final %.1f" % er[-1], transform=axr.transAxes, ha="right", va="bottom",
                 fontsize=8.5, color="0.25")
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "eff_rank.png")))

    # ---- gradient noise scale ----------------------------------------------------------------------
    gs, gv = run.series("grad_noise_scale", [r for r in run.train if "grad_noise_scale" in r])
    ok = [(s, v) for s, v in zip(gs, gv) if finite(v)]
    if ok:
        fig, ax = plt.subplots(figsize=(9, 4.4))
        ax.plot([s for s, _ in ok], [v for _, v in ok], "o-", color="C5", ms=4, lw=1.3,
                label="B_simple = tr(S) / |G|^2")
        pos = [v for _, v in ok if v > 0]
        if len(pos) == len(ok) and max(pos) / min(pos) > 20:
            set_logy(ax)
        ax.set_xlabel("update step")
        ax.set_ylabel("simple gradient noise scale")
        ax.set_title(textwrap.fill("%s: gradient noise scale (McCandlish et al. 2018), diagnostic steps" % head, 80))
        ax.legend(loc="best", framealpha=0.85)
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "grad_noise_scale.png")))

    # ---- QK-Clip: heads clipped per step -----------------------------------------------------------
    if run.has_key("qk_clipped"):
        recs = [r for r in run.train if "qk_clipped" in r]
        qs, qv = run.series("qk_clipped", recs)
        fig, ax = plt.subplots(figsize=(9, 4.4))
        qv = [v if finite(v) else 0.0 for v in qv]
        width = max(1.0, 0.8 * min((b - a for a, b in zip(qs, qs[1:])), default=1))
        ax.bar(qs, qv, width=width, color="C3", label="heads clipped at that step")
        heads = num(run.cfg.get("model.n_layers")) * num(run.cfg.get("model.n_heads"))
        if finite(heads) and heads > 0:
            ax.axhline(heads, color="0.4", ls="--", lw=1)
            ax.text(0.01, heads, " all %d heads" % heads, color="0.3", fontsize=8, ha="left", va="bottom",
                    transform=ax.get_yaxis_transform())
            ax.set_ylim(0, heads * 1.12)
        elif not any(qv):
            ax.set_ylim(0, 1)
        thr = run.cfg.get("optim.qk_clip")
        total = sum(qv)
        ax.text(0.99, 0.95, "%d head clips over %d logged steps%s" % (total, len(qs), "" if total else ": none"),
                transform=ax.transAxes, ha="right", va="top", fontsize=9, color="0.2")
        ax.set_xlabel("update step")
        ax.set_ylabel("attention heads clipped")
        ax.set_title(textwrap.fill("%s: QK-Clip%s" % (head, (" (optim.qk_clip = %s)" % thr) if thr else ""), 80))
        from matplotlib.ticker import MaxNLocator
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "qk_clip.png")))

    # ---- every other per-layer series the records hold (layers_<name>.png): a statistic added to
    # the model's LayerSeries gets its figure without a change here -------------------------------
    drawn = {"grad_norm", "grad_norm_attn", "grad_norm_ffn", "grad_norm_norms", "update_ratio", "act_rms",
             "act_max", "attn_entropy", "attn_logit_max", "attn_sink", "block_cos"}
    names = []
    for r in run.train:
        for k in (r.get("layers") or {}) if isinstance(r.get("layers"), dict) else ():
            if k not in drawn and k not in names:
                names.append(k)
    gx, grows = run.layer_matrix("grad_norm")
    blocks = len(grows[0]) if grows else -1  # L: layers.grad_norm is in every train record
    for name in names:
        xs, rows = run.layer_matrix(name)
        if not xs or not np.isfinite(np.array(rows, dtype=float)).any():
            continue
        n = len(rows[0])
        stream = n == blocks + 1  # act_* series: L + 1 stream positions
        labs = (["entering block %d" % j for j in range(n - 1)] + ["after last block"]) if stream else \
               ["block %d" % j for j in range(n)]
        pos = np.array([v for row in rows for v in row if v is not None and np.isfinite(v)], dtype=float)
        fig, ax = plt.subplots(figsize=(7.6, 4.9))
        per_layer_lines(ax, xs, rows, labs, "layers.%s over training" % name, name,
                        logy=bool(len(pos)) and pos.min() > 0 and pos.max() / pos.min() > 30,
                        colorbar_label="stream position" if stream else "block index")
        fig.suptitle(textwrap.fill("%s: layers.%s (src/metrics/README.md)" % (head, name), 70))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "layers_%s.png" % name)))

    # ---- AttnRes: depth-attention weights of the last full-diagnostics record (reader x source) ----
    last = [r for r in run.train if isinstance(r.get("attnres_weights"), dict) and r["attnres_weights"]]
    if last:
        rec = last[-1]
        readers = list(rec["attnres_weights"].keys())
        rows = [[num(v) for v in rec["attnres_weights"][k]] for k in readers]
        cols = max(len(r) for r in rows)
        grid = np.full((len(readers), cols), np.nan)
        for i, r in enumerate(rows):
            grid[i, :len(r)] = r
        fig, ax = plt.subplots(figsize=(1.2 + 0.45 * cols + 2.2, 1.4 + 0.32 * len(readers)))
        im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_yticks(range(len(readers)))
        ax.set_yticklabels(readers, fontsize=8)
        ax.set_xticks(range(cols))
        ax.set_xticklabels(["e"] + [str(j) for j in range(1, cols)], fontsize=8)
        ax.set_xlabel("source (e = embedding, then groups and partial sum in order)")
        ax.set_ylabel("reader (sublayer)")
        for i in range(len(readers)):
            for j in range(cols):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, "%.2f" % grid[i, j], ha="center", va="center", fontsize=6,
                            color="white" if grid[i, j] < 0.5 else "black")
        fig.colorbar(im, ax=ax, label="mean weight")
        fig.suptitle(textwrap.fill("%s: AttnRes weights at step %d (attnres_weights)" % (head, rec["step"]), 70))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "attnres_weights.png")))
    return written



# ----------------------------------------------------------------------------------------------
# sweep
# ----------------------------------------------------------------------------------------------

FIXED_COLUMNS = ["row", "name", "seed", "n", "status", "steps", "final_train_loss", "best_val_loss",
                 "best_val_excess", "best_val_bpb", "diverged", "spike_count", "spike_score", "max_grad_norm",
                 "grad_ratio_first_last", "final_eff_rank", "tok_per_s", "wall_s"]


def short_name(key, keys):
    parts = key.split(".")
    if len(parts) == 1:
        return key
    s = ".".join(parts[1:])
    if sum(1 for k in keys if k != key and ".".join(k.split(".")[1:]) == s) > 0:
        return key
    return s


def value_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v == int(v) and abs(v) < 1e15 and not isinstance(v, bool):
        return repr(v)
    return str(v)


def sort_key(v):
    f = num(v)
    return (0, f, "") if finite(f) else (1, 0.0, str(v))


class Sweep:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.label = os.path.basename(self.path.rstrip("/"))
        self.axes = []
        self.points = []  # dicts: name, over {key: text}, seed, status, final, best_val, diverged, dir
        rows, header = [], []
        csv_path = os.path.join(self.path, "summary.csv")
        if os.path.isfile(csv_path):
            try:
                with open(csv_path, "r", encoding="utf-8", errors="replace", newline="") as f:
                    rd = csv.reader(f)
                    header = next(rd, [])
                    rows = [dict(zip(header, r)) for r in rd if r]
            except (OSError, csv.Error) as e:
                _log("cannot read %s: %s" % (csv_path, e))
        if header[:2] == ["row", "name"] and "seed" in header:
            # summary.cpp writes row, name, the axes, seed, n, status, then the metrics: a metric
            # column added later is never mistaken for an axis
            self.axes = [c for c in header[2:header.index("seed")] if c]
        else:
            self.axes = [c for c in header if c and c not in FIXED_COLUMNS]
        by_name = {}
        for r in rows:
            if r.get("row", "run") not in ("run", "") or not r.get("name"):
                continue
            by_name[r["name"]] = r
        runs_dir = os.path.join(self.path, "runs")
        names = list(by_name)
        if os.path.isdir(runs_dir):
            for n in sorted(os.listdir(runs_dir)):
                if n not in by_name and os.path.isdir(os.path.join(runs_dir, n)):
                    names.append(n)
        for n in names:
            d = os.path.join(runs_dir, n)
            pj = {}
            try:
                with open(os.path.join(d, "point.json"), "r", encoding="utf-8") as f:
                    pj = json.load(f)
            except (OSError, ValueError):
                pass
            if not isinstance(pj, dict):
                pj = {}
            r = by_name.get(n, {})
            over = {}
            if isinstance(pj.get("overrides"), dict):
                for k, v in pj["overrides"].items():
                    over[k] = value_text(v)
                    if k not in self.axes and k != "seed":
                        self.axes.append(k)
            for k in self.axes:
                if r.get(k, "") != "":
                    over[k] = r[k]
            if not over and not r and not os.path.isfile(os.path.join(d, "metrics.jsonl")):
                continue
            p = {"name": n, "dir": d, "over": over, "row": r,
                 "seed": r.get("seed") or (str(pj.get("seed")) if pj.get("seed") is not None else ""),
                 "status": r.get("status") or pj.get("status") or ""}
            self.points.append(p)
        # numbers: summary.csv first, `normlab report --json` of the run where a cell is empty (both
        # are the numbers of src/metrics/records.cpp)
        for p in self.points:
            r = p["row"]
            run = Run(p["dir"], p["name"]) if os.path.isfile(os.path.join(p["dir"], "metrics.jsonl")) else None
            p["run"] = run

            def value(column, report_key):
                v = num(r.get(column))
                return v if finite(v) or run is None else run.derived(report_key)
            st = str(p["status"])
            p["final"] = value("final_train_loss", "final_train_loss")
            p["best_val"] = value("best_val_loss", "best_val_loss")
            p["spike_score"] = value("spike_score", "spike_score")
            p["eff_rank"] = value("final_eff_rank", "final_eff_rank")
            div = value("diverged", "diverged")
            p["diverged"] = (finite(div) and div > 0) or st in ("diverged",)
            p["failed"] = st == "failed"
        self.axes = [a for a in self.axes if any(a in p["over"] for p in self.points)]
        fl = [(p["run"].floor_train, p["run"].floor_val) for p in self.points if p["run"] is not None]
        self.floor_train = next((a for a, _ in fl if finite(a)), float("nan"))
        self.floor_val = next((b for _, b in fl if finite(b)), float("nan"))
        if not finite(self.floor_val):
            self.floor_train, self.floor_val = find_floor(self.path, {})

    def values(self, axis):
        vs = {p["over"].get(axis) for p in self.points if p["over"].get(axis) is not None}
        return sorted(vs, key=sort_key)

    def varying(self):
        return [a for a in self.axes if len(self.values(a)) > 1]

    def short(self, axis):
        return short_name(axis, self.axes)

    def resolve_axis(self, key):
        if key is None:
            return None
        for a in self.axes:
            if key == a or key == self.short(a) or a.endswith("." + key):
                return a
        print("plot.py: --group-by %r is not an axis of this sweep (axes: %s)"
              % (key, ", ".join(self.axes) or "none"), file=sys.stderr)
        raise SystemExit(2)

    def tied(self, a, b):
        """True when axis b's value is a function of axis a's and vice versa (a zip axis)."""
        fa, fb = {}, {}
        for p in self.points:
            va, vb = p["over"].get(a), p["over"].get(b)
            if fa.setdefault(va, vb) != vb or fb.setdefault(vb, va) != va:
                return False
        return True


def smooth(y, frac=0.03):
    import numpy as np
    y = np.asarray(y, dtype=float)
    n = y.size
    w = max(1, int(round(n * frac)))
    if w <= 1 or n < 5:
        return y
    out = np.empty_like(y)
    for i in range(n):
        seg = y[max(0, i - w):min(n, i + w + 1)]
        seg = seg[np.isfinite(seg)]
        out[i] = seg.mean() if seg.size and np.isfinite(y[i]) else np.nan
    return out


def group_label(sweep, axis, value):
    return "%s=%s" % (sweep.short(axis), value)


def plot_sweep_curves(sweep, group_axis, outdir):
    import numpy as np
    plt = mpl()
    pts = [p for p in sweep.points if p["run"] is not None and (p["run"].train or p["run"].evals)]
    if not pts:
        _log("%s: no run has metrics yet; no loss curves" % sweep.path)
        return None
    groups = sweep.values(group_axis) if group_axis else [None]
    cmap = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")
    color = {g: cmap(i % cmap.N) for i, g in enumerate(groups)}
    # a second varying axis (not tied to the group axis) gets line styles when it has few values
    style_axis = None
    for a in sweep.varying():
        if a != group_axis and not (group_axis and sweep.tied(group_axis, a)) and len(sweep.values(a)) <= 4:
            style_axis = a
            break
    styles = ["-", "--", ":", "-."]
    style = {v: styles[i] for i, v in enumerate(sweep.values(style_axis))} if style_axis else {}

    fig, ax = plt.subplots(figsize=(9, 5.6))
    sane = []
    for p in pts:
        st, lo = p["run"].series("loss")
        lo = np.array(lo, dtype=float)
        if not p["diverged"]:
            sane += [float(v) for v in lo[np.isfinite(lo)]]
            sane += [num(e.get("val_loss")) for e in p["run"].evals if finite(num(e.get("val_loss")))]
    if not sane:  # everything diverged: use whatever is finite
        for p in pts:
            sane += [v for v in p["run"].series("loss")[1] if finite(v)]
    lo_lim, hi_lim = (min(sane), max(sane)) if sane else (0.5, 6.0)
    fv = sweep.floor_val
    if finite(fv):
        lo_lim = min(lo_lim, fv)
    use_log = lo_lim > 0 and hi_lim / lo_lim > 2.5
    top = hi_lim * 1.12 if use_log else hi_lim + 0.08 * (hi_lim - lo_lim + 1e-9)
    div_x, div_c = [], []
    for p in pts:
        g = p["over"].get(group_axis) if group_axis else None
        c = color.get(g, "0.4")
        ls = style.get(p["over"].get(style_axis), "-") if style_axis else "-"
        st, lo = p["run"].series("loss")
        st, lo = np.array(st, dtype=float), np.array(lo, dtype=float)
        y = smooth(lo)
        ok = np.isfinite(y) & (y <= top)
        ax.plot(st[ok], y[ok], color=c, ls=ls, lw=1.2, alpha=0.85)
        es = [e["step"] for e in p["run"].evals if finite(num(e.get("val_loss")))]
        ev = [num(e.get("val_loss")) for e in p["run"].evals if finite(num(e.get("val_loss")))]
        keep = [(s, v) for s, v in zip(es, ev) if v <= top]
        if keep:
            ax.plot([s for s, _ in keep], [v for _, v in keep], "o", color=c, ms=4.5, mec="k", mew=0.4)
        if p["diverged"] or p["failed"] or (~np.isfinite(lo)).any() or (lo[np.isfinite(lo)] > top).any():
            bad = np.where(~np.isfinite(lo) | (lo > top))[0]
            if bad.size:
                div_x.append(float(st[bad[0]]))
                div_c.append(c)
            elif p["diverged"] and st.size:
                div_x.append(float(st[-1]))
                div_c.append(c)
    if use_log:
        ax.set_yscale("log")
        ax.set_ylim(lo_lim / 1.06, top)
        readable_log(ax.yaxis, lo_lim / 1.06, top)
    else:
        ax.set_ylim(lo_lim - 0.05 * (hi_lim - lo_lim + 1e-9), top)
    if div_x:
        clip_top(ax, div_x, None, top, div_c, size=70)
    if finite(fv):
        ax.axhline(fv, color="k", ls="--", lw=1)
    from matplotlib.lines import Line2D
    handles = []
    for g in groups:
        n = sum(1 for p in pts if (p["over"].get(group_axis) if group_axis else None) == g)
        lab = ("%s (%d run%s)" % (group_label(sweep, group_axis, g), n, "" if n == 1 else "s")) if group_axis else "runs"
        handles.append(Line2D([], [], color=color[g], lw=2, label=lab))
    if style_axis:
        for v, s in style.items():
            handles.append(Line2D([], [], color="0.3", ls=s, lw=1.5, label=group_label(sweep, style_axis, v)))
    handles.append(Line2D([], [], color="0.3", lw=1.2, label="train loss (smoothed)"))
    handles.append(Line2D([], [], color="0.3", marker="o", ls="", mec="k", mew=0.4, label="val loss"))
    if finite(fv):
        handles.append(Line2D([], [], color="k", ls="--", lw=1, label="entropy floor %.3f" % fv))
    if div_x:
        handles.append(Line2D([], [], color="0.3", marker="x", ls="", ms=8, mew=2,
                              label="x at the top: diverged / off scale\nfrom that step"))
    ax.legend(handles=handles, loc="best", framealpha=0.85, ncol=2 if len(handles) > 6 else 1)
    ax.set_xlabel("update step")
    ax.set_ylabel("loss (nats/token)")
    by = (" by %s" % sweep.short(group_axis)) if group_axis else ""
    ax.set_title("sweep %s: loss curves%s (%d runs; same colour = same %s, all seeds)"
                 % (sweep.label, by, len(pts), sweep.short(group_axis) if group_axis else "sweep"))
    fig.tight_layout()
    return save(fig, os.path.join(outdir, "loss_curves.png"))


def plot_sweep_final_vs(sweep, x_axis, logx, fname, what, outdir):
    """Final train loss and best val loss against x_axis, a line per layout (or per the other axes)."""
    import numpy as np
    plt = mpl()
    others = [a for a in sweep.varying() if a != x_axis and not sweep.tied(x_axis, a)]
    if "model.layout" in others:
        others.remove("model.layout")
        others.insert(0, "model.layout")
    panels = [("final", "final train loss", sweep.floor_train)]
    if any(finite(p["best_val"]) for p in sweep.points):
        panels.append(("best_val", "best val loss", sweep.floor_val))
    fig, axs = plt.subplots(1, len(panels), figsize=(9.6, 5.4), squeeze=False)
    any_div = False
    line_keys = sorted({tuple(p["over"].get(a) for a in others) for p in sweep.points},
                       key=lambda t: [sort_key(v) for v in t])
    # colour by the first of the other axes (the layout when it is one), line style and marker by the rest
    firsts = sorted({k[0] for k in line_keys if k}, key=sort_key) if others else []
    cmap = plt.get_cmap("tab10" if max(len(firsts), len(line_keys) if not firsts else 0) <= 10 else "tab20")
    rests = sorted({k[1:] for k in line_keys}, key=lambda t: [sort_key(v) for v in t])
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 3)), "P")]

    def line_style(li, key):
        if not firsts:
            return cmap(li % cmap.N), "-", "o"
        ls, mk = styles[rests.index(key[1:]) % len(styles)]
        return cmap(firsts.index(key[0]) % cmap.N), ls, mk
    xs_all = sorted({num(p["over"].get(x_axis)) for p in sweep.points if finite(num(p["over"].get(x_axis)))})
    for ax, (field, ylabel, floor) in zip(axs[0], panels):
        sane = [p[field] for p in sweep.points if finite(p[field]) and not p["diverged"] and not p["failed"]]
        if not sane:
            sane = [p[field] for p in sweep.points if finite(p[field])]
        lo_lim, hi_lim = (min(sane), max(sane)) if sane else (0.5, 6.0)
        # the floor joins the y range only when that does not squash the results into a sliver
        floor_in = finite(floor) and floor >= lo_lim - 0.6 * max(hi_lim - lo_lim, 0.05)
        if floor_in:
            lo_lim = min(lo_lim, floor)
        span = max(hi_lim - lo_lim, 0.05 * max(abs(hi_lim), 1e-3))
        top = hi_lim + 0.15 * span
        div_x, div_c = [], []
        for li, key in enumerate(line_keys):
            c, lstyle, mk = line_style(li, key)
            lab = ", ".join("%s=%s" % (sweep.short(a), v) for a, v in zip(others, key)) or "all runs"
            mx, my, sd = [], [], []
            for x in xs_all:
                ps = [p for p in sweep.points if num(p["over"].get(x_axis)) == x
                      and tuple(p["over"].get(a) for a in others) == key]
                good = [p[field] for p in ps if finite(p[field]) and not p["diverged"] and not p["failed"]]
                for p in ps:
                    if p["diverged"] or p["failed"] or not finite(p[field]) or p[field] > top:
                        div_x.append(x)
                        div_c.append(c)
                if len(good) > 1:
                    ax.scatter([x] * len(good), good, color=c, s=12, alpha=0.5, zorder=3)
                if good:
                    mx.append(x)
                    my.append(float(np.mean(good)))
                    sd.append(float(np.std(good)))
            if mx:
                ax.errorbar(mx, my, yerr=sd if any(s > 0 for s in sd) else None, fmt=mk, ls=lstyle, color=c, lw=1.6,
                            ms=5, capsize=3, label=lab, zorder=4)
            else:
                ax.plot([], [], marker=mk, ls=lstyle, color=c, label=lab + " (no finite result)")
        if logx:
            ax.set_xscale("log")
            from matplotlib.ticker import NullFormatter, NullLocator
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(xs_all)
            ax.set_xticklabels([fmt_num(x) for x in xs_all])
        else:
            ax.set_xticks(xs_all)
            ax.set_xticklabels(["%g" % x for x in xs_all])
        if xs_all:
            if logx:
                ax.set_xlim(xs_all[0] / 1.5, xs_all[-1] * 1.5)
            else:
                pad = 0.06 * (xs_all[-1] - xs_all[0]) if len(xs_all) > 1 else 1
                ax.set_xlim(xs_all[0] - pad, xs_all[-1] + pad)
        ax.set_ylim(lo_lim - 0.1 * span, top)
        if div_x:
            clip_top(ax, div_x, None, top, div_c, size=80)
            any_div = True
        if floor_in:
            ax.axhline(floor, color="k", ls="--", lw=1)
            ax.text(0.99, floor, "entropy floor %.3f " % floor, transform=ax.get_yaxis_transform(),
                    ha="right", va="bottom", fontsize=8)
        elif finite(floor):
            ax.text(0.99, 0.02, "entropy floor %.3f (below this range)" % floor, transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=8, color="0.3")
        ax.set_xlabel(what)
        ax.set_ylabel(ylabel + " (nats/token)")
        ax.set_title(ylabel + (" (last logged batch)" if field == "final" else " (min over evals)"))
    handles, labels = axs[0][0].get_legend_handles_labels()
    if any_div:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color="0.3", marker="x", ls="", ms=8, mew=2))
        labels.append("x at the top: diverged / failed (or off scale)")
    ncol = 1 if len(handles) <= 2 else (2 if len(handles) <= 6 else 3)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8.5, framealpha=0.9)
    nseeds = len({p["seed"] for p in sweep.points})
    fig.suptitle("sweep %s: loss against %s%s" % (
        sweep.label, sweep.short(x_axis),
        " (mean over %d seeds, bars = std, dots = seeds)" % nseeds if nseeds > 1 else ""))
    rows_leg = (len(handles) + ncol - 1) // ncol
    fig.tight_layout(rect=(0, min(0.45, 0.035 * rows_leg + 0.03), 1, 1))
    return save(fig, os.path.join(outdir, fname))


# ---- categorical axes (a layout or norm ablation): compare points, not curves against a number ---

def categorical_axes(sweep):
    """Varying axes with a value that is not a number (layout names, norm types, true/false)."""
    return [a for a in sweep.varying() if any(not finite(num(v)) for v in sweep.values(a))]


def axis_order(sweep, axis):
    """A categorical axis's values in sweep order (summary.csv rows follow the sweep file's lists);
    a numeric axis's values sorted."""
    if any(not finite(num(v)) for v in sweep.values(axis)):
        seen = []
        for p in sweep.points:
            v = p["over"].get(axis)
            if v is not None and v not in seen:
                seen.append(v)
        return seen
    return sweep.values(axis)


class CategoryLayout:
    """The x categories (values of one categorical axis) and, within each, one group per value
    combination of the other varying axes (those not tied to it)."""

    def __init__(self, sweep, cat_axis):
        self.sweep, self.axis = sweep, cat_axis
        self.cats = axis_order(sweep, cat_axis)
        self.others = [a for a in sweep.varying() if a != cat_axis and not sweep.tied(cat_axis, a)]
        orders = [axis_order(sweep, a) for a in self.others]
        groups = {self.group_of(p) for p in sweep.points}
        self.groups = sorted(groups, key=lambda g: [o.index(v) if v in o else len(o) for o, v in zip(orders, g)])

    def group_of(self, p):
        return tuple(p["over"].get(a) for a in self.others)

    def points(self, cat, group):
        return [p for p in self.sweep.points if p["over"].get(self.axis) == cat and self.group_of(p) == group]

    def group_label(self, group):
        return ", ".join("%s=%s" % (self.sweep.short(a), v) for a, v in zip(self.others, group)) or "all runs"

    def cat_label(self, cat):
        return "%s=%s" % (self.sweep.short(self.axis), cat)


def category_dots(ax, lay, field, ylabel, colors, floor=float("nan"), bad_is_missing=True):
    """One column of dots per (category, group): seeds as small dots, their mean as a large marker
    with a min..max bar; diverged / failed seeds (when bad_is_missing) as x pinned to the top."""
    import numpy as np
    n = len(lay.groups)
    width = 0.72
    offs = [(-width / 2 + width * (j + 0.5) / n) if n > 1 else 0.0 for j in range(n)]
    cells = []  # (x, good values, bad count, colour)
    for i, cat in enumerate(lay.cats):
        for j, g in enumerate(lay.groups):
            ps = lay.points(cat, g)
            if not ps:
                continue
            good = [p[field] for p in ps if finite(p[field]) and not (bad_is_missing and (p["diverged"] or p["failed"]))]
            cells.append((i + offs[j], good, len(ps) - len(good), colors(i, j)))
    vals = [v for _, good, _, _ in cells for v in good]
    if vals:
        lo_lim, hi_lim = min(vals), max(vals)
    else:
        lo_lim, hi_lim = (0.0, 1.0)
    floor_in = finite(floor) and floor >= lo_lim - 0.6 * max(hi_lim - lo_lim, 0.05)
    if floor_in:
        lo_lim = min(lo_lim, floor)
    span = max(hi_lim - lo_lim, 0.05 * max(abs(hi_lim), 1e-3))
    top = hi_lim + 0.15 * span
    bad_x, bad_c = [], []
    jit = min(0.05, 0.3 / max(n, 1))
    for x, good, nbad, c in cells:
        if good:
            m = float(np.mean(good))
            k = len(good)
            if k > 1:
                ax.scatter([x + jit * (t - (k - 1) / 2) / max(k - 1, 1) * 2 for t in range(k)], good, s=14,
                           color=c, alpha=0.55, edgecolors="none", zorder=3)
            ax.errorbar([x], [m], yerr=[[m - min(good)], [max(good) - m]] if k > 1 else None, fmt="o", color=c,
                        ms=7, mec="k", mew=0.5, capsize=4, lw=1.6, zorder=4)
        bad_x += [x] * nbad
        bad_c += [c] * nbad
    if bad_x:
        clip_top(ax, bad_x, None, top, bad_c, size=70)
    ax.set_xlim(-0.6, len(lay.cats) - 0.4)
    ax.set_ylim(lo_lim - 0.1 * span, top)
    for i in range(1, len(lay.cats)):
        ax.axvline(i - 0.5, color="0.85", lw=0.8, zorder=0)
    ax.grid(axis="x", visible=False)
    if floor_in:
        ax.axhline(floor, color="k", ls="--", lw=1)
        ax.text(0.99, floor, "entropy floor %.3f " % floor, transform=ax.get_yaxis_transform(), ha="right",
                va="bottom", fontsize=8)
    ax.set_ylabel(ylabel)
    return bool(bad_x)


def plot_sweep_categories(sweep, cat_axis, outdir):
    """best_val_compare.png: best validation loss per value of a categorical axis, grouped by the
    other axes, mean and min..max over seeds with the seeds as dots; below, when the runs have
    them, the spike score and the final effective rank in the same layout."""
    plt = mpl()
    lay = CategoryLayout(sweep, cat_axis)
    pts = sweep.points
    panels = []
    if any(finite(p["best_val"]) for p in pts):
        panels.append(("best_val", "best val loss\n(nats/token)", sweep.floor_val, True))
    elif any(finite(p["final"]) for p in pts):
        panels.append(("final", "final train loss\n(nats/token)", sweep.floor_train, True))
    else:
        _log("%s: no finite loss in any run; no best_val_compare.png" % sweep.path)
        return None
    if any(finite(p["spike_score"]) for p in pts):
        panels.append(("spike_score", "spike score\n(share of steps, z > thr)", float("nan"), False))
    if any(finite(p["eff_rank"]) for p in pts):
        panels.append(("eff_rank", "final effective rank\n(last eval)", float("nan"), True))
    plt_cm = plt.get_cmap("tab10" if max(len(lay.groups), len(lay.cats)) <= 10 else "tab20")
    if len(lay.groups) > 1:
        colors = lambda i, j: plt_cm(j % plt_cm.N)
    else:  # one group: a colour per category, as in the loss curves
        colors = lambda i, j: plt_cm(i % plt_cm.N)
    w = min(13.5, max(9.0, 3.0 + 0.9 * len(lay.cats) * max(1, min(len(lay.groups), 4)) ** 0.5))
    fig, axs = plt.subplots(len(panels), 1, figsize=(w, 1.6 + 3.0 * len(panels)), sharex=True, squeeze=False)
    any_bad = False
    for ax, (field, ylabel, floor, bad_missing) in zip(axs[:, 0], panels):
        any_bad |= category_dots(ax, lay, field, ylabel, colors, floor, bad_missing)
        if field == "spike_score":
            ax.set_ylim(bottom=-0.02 * max(ax.get_ylim()[1], 0.01))
    ax = axs[-1, 0]
    ax.set_xticks(range(len(lay.cats)))
    long_labels = sum(len(str(c)) for c in lay.cats) > 70
    ax.set_xticklabels([str(c) for c in lay.cats], rotation=30 if long_labels else 0,
                       ha="right" if long_labels else "center")
    ax.set_xlabel(sweep.short(cat_axis))
    from matplotlib.lines import Line2D
    handles = []
    if len(lay.groups) > 1:
        handles += [Line2D([], [], color=colors(0, j), marker="o", ls="", ms=7, mec="k", mew=0.5,
                           label=lay.group_label(g)) for j, g in enumerate(lay.groups)]
    nseeds = max((len(lay.points(c, g)) for c in lay.cats for g in lay.groups), default=1)
    if nseeds > 1:
        handles.append(Line2D([], [], color="0.3", marker="o", ls="-", ms=7, mec="k", mew=0.5,
                              label="mean over seeds, bar = min..max"))
        handles.append(Line2D([], [], color="0.3", marker="o", ls="", ms=4, alpha=0.55, label="one seed"))
    if any_bad:
        handles.append(Line2D([], [], color="0.3", marker="x", ls="", ms=8, mew=2,
                              label="x at the top: a diverged / failed seed"))
    rows_leg = 0
    if handles:
        ncol = min(4, len(handles))
        fig.legend(handles=handles, loc="lower center", ncol=ncol, framealpha=0.9)
        rows_leg = (len(handles) + ncol - 1) // ncol
    by = (" by %s" % ", ".join(sweep.short(a) for a in lay.others)) if lay.others else ""
    fig.suptitle(textwrap.fill("sweep %s: %s per %s%s (%d run%s%s)" % (
        sweep.label, "best val loss" if panels[0][0] == "best_val" else "final train loss", sweep.short(cat_axis),
        by, len(pts), "" if len(pts) == 1 else "s", ", %d seeds a point" % nseeds if nseeds > 1 else ""), 100))
    fig.tight_layout(rect=(0, min(0.3, (0.3 * rows_leg + 0.1) / fig.get_figheight()) if rows_leg else 0, 1, 1))
    return save(fig, os.path.join(outdir, "best_val_compare.png"))


def plot_sweep_profiles(sweep, cat_axis, key, first, fname, ylabel, what, outdir, logy):
    """One line per point (seeds averaged): a per-block series (layers.<key>) of the first or the last
    record carrying it, against block index; colour = value of the categorical axis, line style =
    the other axes. None (nothing written) when no run logs the series."""
    import numpy as np
    plt = mpl()
    lay = CategoryLayout(sweep, cat_axis)
    cm = plt.get_cmap("tab10" if len(lay.cats) <= 10 else "tab20")
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 3)), "P")]
    lines, steps_used, nseeds = [], set(), 0
    for i, cat in enumerate(lay.cats):
        for j, g in enumerate(lay.groups):
            profs = []
            for p in lay.points(cat, g):
                if p["run"] is None:
                    continue
                st, row = p["run"].first_layer_row(key) if first else p["run"].last_layer_row(key)
                if row is not None and any(finite(v) for v in row):
                    profs.append(row)
                    steps_used.add(st)
            if not profs:
                continue
            nseeds = max(nseeds, len(profs))
            width = max(len(r) for r in profs)
            a = np.array([r + [float("nan")] * (width - len(r)) for r in profs], dtype=float)
            cnt = np.isfinite(a).sum(axis=0)
            mean = np.where(cnt > 0, np.nansum(np.where(np.isfinite(a), a, 0), axis=0) / np.maximum(cnt, 1), np.nan)
            ls, mk = styles[j % len(styles)]
            lines.append((i, j, mean, ls, mk))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(9.6, 5.6))
    allv = []
    for i, j, mean, ls, mk in lines:
        x = np.arange(mean.size)
        ok = np.isfinite(mean) & ((mean > 0) if logy else True)
        ax.plot(x[ok], mean[ok], ls=ls, marker=mk, color=cm(i % cm.N), lw=1.6, ms=5, alpha=0.9)
        allv += [float(v) for v in mean[ok]]
    if logy and allv and min(allv) > 0:
        ax.set_yscale("log")
        readable_log(ax.yaxis, min(allv), max(allv))
    L = max(m.size for _, _, m, _, _ in lines)
    ax.set_xticks(range(L) if L <= 24 else range(0, L, max(1, L // 12)))
    ax.set_xlabel("block index (0 = first block after the embedding)")
    ax.set_ylabel(ylabel)
    from matplotlib.lines import Line2D
    used_i = sorted({i for i, _, _, _, _ in lines})
    used_j = sorted({j for _, j, _, _, _ in lines})
    handles = [Line2D([], [], color=cm(i % cm.N), lw=2, label=lay.cat_label(lay.cats[i])) for i in used_i]
    if len(lay.groups) > 1:
        handles += [Line2D([], [], color="0.3", ls=styles[j % len(styles)][0], marker=styles[j % len(styles)][1],
                           lw=1.5, label=lay.group_label(lay.groups[j])) for j in used_j]
    ax.legend(handles=handles, loc="best", framealpha=0.85, ncol=2 if len(handles) > 7 else 1)
    st = sorted(steps_used)
    at = ("step %d" % st[0]) if len(st) == 1 else ("steps %d..%d" % (st[0], st[-1]))
    fig.suptitle(textwrap.fill("sweep %s: %s (%s; %s)" % (
        sweep.label, what, at, ("mean over %d seeds" % nseeds) if nseeds > 1 else "one seed"), 100))
    fig.tight_layout()
    return save(fig, os.path.join(outdir, fname))


def plot_sweep(sweep, group_by, outdir, with_runs):
    written = []
    if not sweep.points:
        _log("%s: no runs found (no summary.csv rows, no runs/*/point.json)" % sweep.path)
        return written
    group_axis = sweep.resolve_axis(group_by)
    if group_axis is None:
        var = sweep.varying()
        group_axis = var[0] if var else (sweep.axes[0] if sweep.axes else None)
    w = plot_sweep_curves(sweep, group_axis, outdir)
    if w:
        written.append(w)
    var = sweep.varying()
    if "optim.lr" in var:
        written.append(plot_sweep_final_vs(sweep, "optim.lr", True, "final_vs_lr.png",
                                           "peak learning rate (optim.lr, log scale)", outdir))
    if "model.n_layers" in var:
        written.append(plot_sweep_final_vs(sweep, "model.n_layers", False, "final_vs_depth.png",
                                           "depth (model.n_layers, blocks)", outdir))
    cats = categorical_axes(sweep)
    if cats:
        cat_axis = group_axis if group_axis in cats else cats[0]
        for w in (plot_sweep_categories(sweep, cat_axis, outdir),
                  plot_sweep_profiles(sweep, cat_axis, "grad_norm", True, "grad_profile_step0.png",
                                      "gradient norm of the block (L2, before clipping)",
                                      "per-block gradient norm of the first logged update (Xiong et al. 2020, Fig. 3)",
                                      outdir, logy=True),
                  plot_sweep_profiles(sweep, cat_axis, "block_cos", False, "block_cos_profile.png",
                                      "cos(stream entering, stream leaving) of the block",
                                      "how much each block changes the residual stream, last diagnostic step",
                                      outdir, logy=False)):
            if w:
                written.append(w)
    if with_runs:
        for p in sweep.points:
            if p["run"] is not None:
                written += plot_run(p["run"], os.path.join(outdir, "runs", p["name"]))
    return written


# ----------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="plot.py", description="PNG plots of a NormLab run or sweep directory.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Run: loss.png grad_heatmap.png grad_profile.png layers.png, and when "
                                        "logged act_max.png attn_sink.png block_cos.png eff_rank.png layers_<series>.png "
                                        "grad_noise_scale.png qk_clip.png; sweep: loss_curves.png "
                                        "final_vs_lr.png final_vs_depth.png, and with a categorical axis "
                                        "best_val_compare.png grad_profile_step0.png block_cos_profile.png. "
                                        "The head of scripts/plot.py says what each shows.")
    ap.add_argument("dir", help="run directory (metrics.jsonl) or sweep directory (summary.csv, runs/)")
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


def kind_of(d):
    if os.path.isfile(os.path.join(d, "metrics.jsonl")):
        return "run"
    if os.path.isfile(os.path.join(d, "summary.csv")):
        return "sweep"
    runs = os.path.join(d, "runs")
    if os.path.isdir(runs):
        for n in os.listdir(runs):
            if os.path.isfile(os.path.join(runs, n, "point.json")) or os.path.isfile(os.path.join(runs, n, "metrics.jsonl")):
                return "sweep"
    return None


def plot_autopsy(path, out):
    """One step autopsy of `normlab replay` (spikes/step_<N>.autopsy.json): the loss of every row of
    the batch at step N against N-1, per-block gradient norms and update ratios of both updates, and
    the per-head maximum attention logit and entropy at step N."""
    with open(path) as f:
        a = json.load(f)
    plt = mpl()
    from matplotlib.ticker import MaxNLocator
    at, base = a, a.get("baseline")
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    fig.suptitle("step %d autopsy: loss %.4g (logged %.4g), %s" % (
        a["step"], a["loss"], a["logged_loss"],
        "reproducible bit for bit" if a["reproducible"] else "NOT reproducible"))
    ax = axes[0][0]
    rows = [r["loss"] for r in at["rows"]]
    xs = list(range(len(rows)))
    if base:
        ax.bar([x - 0.2 for x in xs], [r["loss"] for r in base["rows"]], width=0.4,
               color="#999999", label="step %d (baseline)" % base["step"])
    ax.bar([x + (0.2 if base else 0) for x in xs], rows, width=0.4 if base else 0.8, color="#d62728",
           label="step %d (%s)" % (a["step"], at["action"]))
    ax.axhline(at["loss"], color="#d62728", lw=0.8, ls="--")
    ax.set_xlabel("row of the batch (micro-batch order)")
    ax.set_ylabel("mean cross-entropy (nats)")
    ax.set_title("loss of each row")
    ax.legend()
    for ax, key, title in ((axes[0][1], "grad_norm", "gradient norm per block"),
                           (axes[1][0], "update_ratio", "update ratio ||dW|| / ||W|| per block")):
        for cap, color in ((base, "#999999"), (at, "#d62728")):
            if cap and key in cap["layers"]:
                v = cap["layers"][key]
                ax.plot(range(len(v)), v, marker="o", color=color, label="step %d" % (cap.get("step", a["step"])))
        ax.set_xlabel("block")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title)
        ax.legend()
    ax = axes[1][1]
    m = at["heads"]["attn_logit_max"]
    if m and m[0]:
        vals = [[num(x) for x in row] for row in m]
        im = ax.imshow(vals, aspect="auto", cmap="magma")
        fig.colorbar(im, ax=ax, label="max pre-softmax score")
        ax.set_xticks(range(len(m[0])))
        ax.set_yticks(range(len(m)))
        ax.set_xlabel("head")
        ax.set_ylabel("block")
        ax.grid(False)
        flat = [v for row in vals for v in row if finite(v)]
        mid = (min(flat) + max(flat)) / 2 if flat else 0
        ent = at["heads"]["attn_entropy"]
        for i, row in enumerate(ent):
            for h, e in enumerate(row):
                ax.text(h, i, "%.2f" % num(e), ha="center", va="center", fontsize=7,
                        color="black" if finite(vals[i][h]) and vals[i][h] > mid else "white")
        ax.set_title("per head at step %d: max logit (colour), entropy (nats)" % a["step"])
    else:
        no_data_note(ax, "no per-head statistics")
    fig.tight_layout()
    return save(fig, out)


def plot_run_autopsies(run_dir, outdir):
    written = []
    for path in sorted(glob.glob(os.path.join(run_dir, "spikes", "step_*.autopsy.json"))):
        name = os.path.basename(path)[:-len(".autopsy.json")]
        written.append(plot_autopsy(path, os.path.join(outdir, "autopsy_%s.png" % name)))
    return written


def main(argv):
    if len(argv) == 2 and argv[0] == "--autopsy":  # normlab replay: the PNG beside the autopsy
        ensure_environment()
        plot_autopsy(argv[1], argv[1][:-len(".json")] + ".png")
        return 0
    args = parse_args(argv)
    NORMLAB["path"] = args.normlab
    kind = kind_of(args.dir)
    if kind is None:
        print("plot.py: %s is neither a run directory (metrics.jsonl) nor a sweep directory "
              "(summary.csv or runs/*/point.json)" % args.dir, file=sys.stderr)
        return 2
    ensure_environment()
    outdir = args.out or os.path.join(args.dir, "plots")
    if kind == "run":
        if args.group_by:
            _log("--group-by applies to sweeps only; ignored")
        written = plot_run(Run(args.dir), outdir) + plot_run_autopsies(args.dir, outdir)
    else:
        written = plot_sweep(Sweep(args.dir), args.group_by, outdir, args.runs)
    if not written:
        _log("nothing plotted")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
