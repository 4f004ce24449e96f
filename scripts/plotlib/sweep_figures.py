"""A sweep's figures: SWEEP_FIGURES is the table (file name, function, what it needs); plot_sweep
draws every entry the sweep has what it needs for. A function takes (sweep, axes, outdir), axes
the SweepAxes of the drawing, and returns the path it wrote or None.

Each point's numbers are its row of the sweep summary (plotlib.read.Sweep). Where a figure draws a
seed mean (and std) it is the summary's `mean` (and `std`) row of the group: seed_stats of
src/metrics/records.cpp, over the seeds with a finite value, sample std (n - 1); a diverged seed
with a finite value counts like any other, a seed without one is left out. The legends say so
(SEED_MEAN_TEXT). Every seed is also drawn as a dot (hollow when diverged or failed; an x pinned
at the top when it has no finite value or is off the scale), and a min..max bar spans the dots
drawn. Without a summary (an older sweep directory without sweep.yaml or summary.csv) the seeds are
drawn without a mean. Axis names are the summary's short names.
"""

import itertools
import os
import textwrap

from plotlib.draw import clip_top, mpl, readable_log, save
from plotlib.read import categorical_axes, finite, fmt_num, note, num, sort_key
from plotlib.run_figures import plot_run

SEED_MEAN_TEXT = "seed mean (sweep summary: the seeds with a finite value, diverged ones included)"
DOT_TEXT = "a seed (hollow: diverged or failed)"
X_TEXT = "x at the top: a seed with no finite value, or off the scale"
STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 3)), "P")]


class SweepAxes:
    """The axes a drawing uses: group (one colour each in the loss curves) and cat (the categorical
    axis of the comparison figures, None without one)."""

    def __init__(self, sweep, group_by):
        group = sweep.resolve_axis(group_by)
        if group is None:
            var = sweep.varying()
            group = var[0] if var else (sweep.axes[0] if sweep.axes else None)
        self.group = group
        cats = categorical_axes(sweep)
        self.cat = (group if group in cats else cats[0]) if cats else None


def group_label(sweep, axis, value):
    return "%s=%s" % (sweep.short(axis), value)


def smooth(y, frac=0.03):
    """A centred moving average of a train-loss curve, for display only (the loss curves)."""
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


def hollow(p):
    return p["diverged"] or p["failed"]


# ---- loss curves -------------------------------------------------------------------------------

def fig_loss_curves(sweep, axes, outdir):
    import numpy as np
    plt = mpl()
    group_axis = axes.group
    pts = [p for p in sweep.points if p["run"] is not None and (p["run"].train or p["run"].evals)]
    if not pts:
        note("%s: no run has metrics yet; no loss curves" % sweep.path)
        return None
    groups = axis_order(sweep, group_axis) if group_axis else [None]  # colours as best_val_compare's
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
        if not p["diverged"]:
            sane += [v for v in p["run"].series("loss")[1] if finite(v)] + p["run"].eval_series("val_loss")[1]
    if not sane:  # everything diverged: use whatever is finite
        for p in pts:
            sane += [v for v in p["run"].series("loss")[1] if finite(v)]
    lo_lim, hi_lim = (min(sane), max(sane)) if sane else (0.5, 6.0)
    fv = sweep.floor("entropy_floor")
    if finite(fv):
        lo_lim = min(lo_lim, fv)
    use_log = lo_lim > 0 and hi_lim / lo_lim > 2.5
    top = hi_lim * 1.12 if use_log else hi_lim + 0.08 * (hi_lim - lo_lim + 1e-9)
    div_x, div_c = [], []
    for p in pts:
        c = color.get(p["over"].get(group_axis) if group_axis else None, "0.4")
        ls = style.get(p["over"].get(style_axis), "-") if style_axis else "-"
        st, lo = p["run"].series("loss")
        st, lo = np.array(st, dtype=float), np.array(lo, dtype=float)
        y = smooth(lo)
        ok = np.isfinite(y) & (y <= top)
        ax.plot(st[ok], y[ok], color=c, ls=ls, lw=1.2, alpha=0.85)
        keep = [(s, v) for s, v in zip(*p["run"].eval_series("val_loss")) if v <= top]
        if keep:
            ax.plot([s for s, _ in keep], [v for _, v in keep], "o", color=c, ms=4.5, mec="k", mew=0.4)
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
        clip_top(ax, div_x, div_c, size=70)
    if finite(fv):
        ax.axhline(fv, color="k", ls="--", lw=1)
    from matplotlib.lines import Line2D
    handles = []
    for g in groups:
        n = len([p for p in pts if (p["over"].get(group_axis) if group_axis else None) == g])  # runs drawn
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
    ax.set_title(textwrap.fill("sweep %s: loss curves%s (%d runs; same colour = same %s, all seeds)"
                               % (sweep.label, by, len(pts), sweep.short(group_axis) if group_axis else "sweep"), 90))
    fig.tight_layout()
    return save(fig, os.path.join(outdir, "loss_curves.png"))


# ---- seeds and their summary mean against a numeric axis ------------------------------------------

def y_range(values_sane, values_all, floor):
    """(low, top, span, floor_in) of a y axis: the bottom is set by every value, the top by the sane
    values (the means and the seeds that neither diverged nor failed) and by the other values no
    further above them than their own spread, so a diverged seed's value does not stretch the scale
    (it is pinned to the top instead); the floor joins when that does not squash the values into a
    sliver."""
    hi_vals = values_sane or values_all
    lo_vals = values_all + values_sane
    if not hi_vals:
        return 0.0, 1.15, 1.0, False
    lo_lim, hi_lim = min(lo_vals), max(hi_vals)
    reach = hi_lim + max(hi_lim - lo_lim, 0.05 * max(abs(hi_lim), 1e-3))
    hi_lim = max([hi_lim] + [v for v in values_all if v <= reach])
    floor_in = finite(floor) and floor >= lo_lim - 0.6 * max(hi_lim - lo_lim, 0.05)
    if floor_in:
        lo_lim = min(lo_lim, floor)
    span = max(hi_lim - lo_lim, 0.05 * max(abs(hi_lim), 1e-3))
    return lo_lim, hi_lim + 0.15 * span, span, floor_in


def floor_line(ax, floor, floor_in):
    if floor_in:
        ax.axhline(floor, color="k", ls="--", lw=1)
        ax.text(0.99, floor, "entropy floor %.3f " % floor, transform=ax.get_yaxis_transform(), ha="right",
                va="bottom", fontsize=8)
    elif finite(floor):
        ax.text(0.99, 0.02, "entropy floor %.3f (below this range)" % floor, transform=ax.transAxes, ha="right",
                va="bottom", fontsize=8, color="0.3")


def seed_dots(ax, x_of, ps, column, top, color, size):
    """Every seed of ps with a finite value as a dot at x_of(i) (hollow when diverged or failed);
    returns (the values drawn, the x of seeds pinned to the top: no finite value or off the scale)."""
    drawn, pinned = [], []
    shown = [p for p in ps if finite(p[column]) and p[column] <= top]
    for i, p in enumerate(shown):
        v = p[column]
        ax.scatter([x_of(i, len(shown))], [v], s=size, zorder=3, linewidths=1.2,
                   facecolors="none" if hollow(p) else color, edgecolors=color, alpha=0.75)
        drawn.append(v)
    pinned = [x_of(0, 1)] * (len(ps) - len(shown))
    return drawn, pinned


def fig_final_vs(sweep, x_axis, logx, fname, what, outdir):
    """Final train loss and best val loss against x_axis: every seed a dot, the summary's seed mean
    with its std as the bar, a line per layout (or per the other axes)."""
    plt = mpl()
    others = [a for a in sweep.varying() if a != x_axis and not sweep.tied(x_axis, a)]
    if "model.layout" in others:
        others.remove("model.layout")
        others.insert(0, "model.layout")
    panels = [("final_train_loss", "final train loss", sweep.floor("train_entropy_floor"))]
    if any(finite(p["best_val_loss"]) for p in sweep.points):
        panels.append(("best_val_loss", "best val loss", sweep.floor("entropy_floor")))
    fig, axs = plt.subplots(1, len(panels), figsize=(9.6, 5.4), squeeze=False)
    line_keys = sorted({tuple(p["over"].get(a) for a in others) for p in sweep.points},
                       key=lambda t: [sort_key(v) for v in t])
    # colour by the first of the other axes (the layout when it is one), line style and marker by the rest
    firsts = sorted({k[0] for k in line_keys if k}, key=sort_key) if others else []
    cmap = plt.get_cmap("tab10" if max(len(firsts), len(line_keys) if not firsts else 0) <= 10 else "tab20")
    rests = sorted({k[1:] for k in line_keys}, key=lambda t: [sort_key(v) for v in t])

    def line_style(li, key):
        if not firsts:
            return cmap(li % cmap.N), "-", "o"
        ls, mk = STYLES[rests.index(key[1:]) % len(STYLES)]
        return cmap(firsts.index(key[0]) % cmap.N), ls, mk
    xs_all = sorted({num(p["over"].get(x_axis)) for p in sweep.points if finite(num(p["over"].get(x_axis)))})
    nseeds = len({p["seed"] for p in sweep.points})
    any_pinned, any_hollow, any_mean = False, False, False
    for ax, (column, ylabel, floor) in zip(axs[0], panels):
        cells = []  # (line index, key, x, points, the summary's seed mean and std)
        for li, key in enumerate(line_keys):
            for x in xs_all:
                ps = [p for p in sweep.points if num(p["over"].get(x_axis)) == x
                      and tuple(p["over"].get(a) for a in others) == key]
                if ps:
                    cells.append((li, key, x, ps, sweep.seed_stat("mean", ps[0]["over"], column),
                                  sweep.seed_stat("std", ps[0]["over"], column)))
        lo_lim, top, span, floor_in = y_range(
            [p[column] for p in sweep.points if finite(p[column]) and not hollow(p)]
            + [c[4] for c in cells if finite(c[4])], [p[column] for p in sweep.points if finite(p[column])], floor)
        pin_x, pin_c = [], []
        for li, key in enumerate(line_keys):
            c, lstyle, mk = line_style(li, key)
            lab = ", ".join("%s=%s" % (sweep.short(a), v) for a, v in zip(others, key)) or "all runs"
            mx, my, sd = [], [], []
            for _, _, x, ps, mean, std in (cell for cell in cells if cell[0] == li):
                _, pinned = seed_dots(ax, lambda i, n, x=x: x, ps, column, top, c, 14 if nseeds > 1 else 30)
                pin_x += pinned
                pin_c += [c] * len(pinned)
                any_hollow |= any(hollow(p) and finite(p[column]) for p in ps)
                if finite(mean):
                    mx.append(x)
                    my.append(mean)
                    sd.append(std if finite(std) else 0.0)
            if mx:
                any_mean = True
                ax.errorbar(mx, my, yerr=sd if any(v > 0 for v in sd) else None, fmt=mk, ls=lstyle, color=c, lw=1.6,
                            ms=6, mec="k", mew=0.5, capsize=3, label=lab, zorder=4)
            else:
                ax.plot([], [], marker=mk, ls="", color=c, label=lab + ("" if sweep.summary_source else " (seeds only)"))
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
        if pin_x:
            clip_top(ax, pin_x, pin_c, size=80)
            any_pinned = True
        floor_line(ax, floor, floor_in)
        ax.set_xlabel(what)
        ax.set_ylabel(ylabel + " (nats/token)")
        ax.set_title(ylabel + (" (last logged batch)" if column == "final_train_loss" else " (min over evals)"))
    handles, labels = axs[0][0].get_legend_handles_labels()
    from matplotlib.lines import Line2D
    if nseeds > 1:
        handles.append(Line2D([], [], color="0.3", marker="o", ls="", ms=4, alpha=0.75))
        labels.append(DOT_TEXT if any_hollow else "one seed")
    elif any_hollow:
        handles.append(Line2D([], [], color="0.3", marker="o", ls="", ms=5, mfc="none"))
        labels.append("hollow: a diverged or failed run")
    if any_pinned:
        handles.append(Line2D([], [], color="0.3", marker="x", ls="", ms=8, mew=2))
        labels.append(X_TEXT)
    ncol = 1 if len(handles) <= 2 else (2 if len(handles) <= 6 else 3)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8.5, framealpha=0.9)
    if nseeds > 1 and any_mean:
        sub = " (%s, bar = sample std)" % SEED_MEAN_TEXT
    elif nseeds > 1 and sweep.summary_source is None:
        sub = " (every seed a dot; no sweep summary, so no mean)"
    else:
        sub = ""
    fig.suptitle(textwrap.fill("sweep %s: loss against %s%s" % (sweep.label, sweep.short(x_axis), sub), 100))
    rows_leg = (len(handles) + ncol - 1) // ncol
    fig.tight_layout(rect=(0, min(0.45, 0.035 * rows_leg + 0.03), 1, 0.97 if sub else 1))
    return save(fig, os.path.join(outdir, fname))


def fig_final_vs_lr(sweep, axes, outdir):
    if "optim.lr" not in sweep.varying():
        return None
    return fig_final_vs(sweep, "optim.lr", True, "final_vs_lr.png", "peak learning rate (optim.lr, log scale)", outdir)


def fig_final_vs_depth(sweep, axes, outdir):
    if "model.n_layers" not in sweep.varying():
        return None
    return fig_final_vs(sweep, "model.n_layers", False, "final_vs_depth.png", "depth (model.n_layers, blocks)", outdir)


# ---- categorical axes (a layout or norm ablation): compare points, not curves against a number ---

def axis_order(sweep, axis):
    """A categorical axis's values in sweep order (the summary's rows follow the sweep file's lists);
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
    combination of the other varying axes (those not tied to it): one summary group a cell."""

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


def category_dots(ax, lay, column, ylabel, colors, floor=float("nan")):
    """One column of dots per (category, group): every seed with a finite value a small dot (hollow
    when diverged or failed), the summary's seed mean a large marker with a bar over the dots'
    min..max; seeds without a finite value (or off the scale) as x pinned to the top. The y range
    holds the means and the seeds that neither diverged nor failed. Returns (any pinned, any
    hollow, any mean)."""
    sweep = lay.sweep
    n = len(lay.groups)
    width = 0.72
    offs = [(-width / 2 + width * (j + 0.5) / n) if n > 1 else 0.0 for j in range(n)]
    cells = []  # (x, points, colour, the summary's seed mean)
    for i, cat in enumerate(lay.cats):
        for j, g in enumerate(lay.groups):
            ps = lay.points(cat, g)
            if ps:
                cells.append((i + offs[j], ps, colors(i, j), sweep.seed_stat("mean", ps[0]["over"], column)))
    means = [m for _, _, _, m in cells if finite(m)]
    lo_lim, top, span, floor_in = y_range(
        [p[column] for _, ps, _, _ in cells for p in ps if finite(p[column]) and not hollow(p)] + means,
        [p[column] for _, ps, _, _ in cells for p in ps if finite(p[column])], floor)
    pin_x, pin_c = [], []
    any_hollow = False
    jit = min(0.05, 0.3 / max(n, 1))
    for x, ps, c, mean in cells:
        drawn, pinned = seed_dots(ax, lambda t, k, x=x: x + jit * (t - (k - 1) / 2) / max(k - 1, 1) * 2,
                                  ps, column, top, c, 14)
        pin_x += [x] * len(pinned)
        pin_c += [c] * len(pinned)
        any_hollow |= any(hollow(p) and finite(p[column]) for p in ps)
        if finite(mean):
            bar = None
            if len(drawn) > 1:  # the bar spans the dots drawn
                bar = [[max(0.0, mean - min(drawn))], [max(0.0, max(drawn) - mean)]]
            ax.errorbar([x], [mean], yerr=bar, fmt="o", color=c, ms=7, mec="k", mew=0.5, capsize=4, lw=1.6,
                        zorder=4)
    if pin_x:
        clip_top(ax, pin_x, pin_c, size=70)
    ax.set_xlim(-0.6, len(lay.cats) - 0.4)
    ax.set_ylim(lo_lim - 0.1 * span, top)
    for i in range(1, len(lay.cats)):
        ax.axvline(i - 0.5, color="0.85", lw=0.8, zorder=0)
    ax.grid(axis="x", visible=False)
    floor_line(ax, floor, floor_in)
    ax.set_ylabel(ylabel)
    return bool(pin_x), any_hollow, bool(means)


def fig_best_val_compare(sweep, axes, outdir):
    """best_val_compare.png: best validation loss per value of the categorical axis, grouped by the
    other axes, every seed a dot with the summary's seed mean; below, when the runs have them, the
    spike score and the final effective rank in the same layout."""
    if axes.cat is None:
        return None
    plt = mpl()
    lay = CategoryLayout(sweep, axes.cat)
    pts = sweep.points
    panels = []
    if any(finite(p["best_val_loss"]) for p in pts):
        panels.append(("best_val_loss", "best val loss\n(nats/token)", sweep.floor("entropy_floor")))
    elif any(finite(p["final_train_loss"]) for p in pts):
        panels.append(("final_train_loss", "final train loss\n(nats/token)", sweep.floor("train_entropy_floor")))
    else:
        note("%s: no finite loss in any run; no best_val_compare.png" % sweep.path)
        return None
    if any(finite(p["spike_score"]) for p in pts):
        panels.append(("spike_score", "spike score\n(share of steps, z > thr)", float("nan")))
    if any(finite(p["final_eff_rank"]) for p in pts):
        panels.append(("final_eff_rank", "final effective rank\n(last eval)", float("nan")))
    cm = plt.get_cmap("tab10" if max(len(lay.groups), len(lay.cats)) <= 10 else "tab20")
    if len(lay.groups) > 1:
        colors = lambda i, j: cm(j % cm.N)
    else:  # one group: a colour per category, as in the loss curves
        colors = lambda i, j: cm(i % cm.N)
    w = min(13.5, max(9.0, 3.0 + 0.9 * len(lay.cats) * max(1, min(len(lay.groups), 4)) ** 0.5))
    fig, axs = plt.subplots(len(panels), 1, figsize=(w, 1.6 + 3.0 * len(panels)), sharex=True, squeeze=False)
    any_pinned = any_hollow = any_mean = False
    for ax, (column, ylabel, floor) in zip(axs[:, 0], panels):
        pinned, hol, mean = category_dots(ax, lay, column, ylabel, colors, floor)
        any_pinned, any_hollow, any_mean = any_pinned or pinned, any_hollow or hol, any_mean or mean
        if column == "spike_score":
            ax.set_ylim(bottom=-0.02 * max(ax.get_ylim()[1], 0.01))
    ax = axs[-1, 0]
    ax.set_xticks(range(len(lay.cats)))
    long_labels = len(" ".join(str(c) for c in lay.cats)) > 70
    ax.set_xticklabels([str(c) for c in lay.cats], rotation=30 if long_labels else 0,
                       ha="right" if long_labels else "center")
    ax.set_xlabel(sweep.short(axes.cat))
    from matplotlib.lines import Line2D
    handles = []
    if len(lay.groups) > 1:
        handles += [Line2D([], [], color=colors(0, j), marker="o", ls="", ms=7, mec="k", mew=0.5,
                           label=lay.group_label(g)) for j, g in enumerate(lay.groups)]
    several = any(len(lay.points(c, g)) > 1 for c in lay.cats for g in lay.groups)
    if any_mean:
        handles.append(Line2D([], [], color="0.3", marker="o", ls="-", ms=7, mec="k", mew=0.5,
                              label=SEED_MEAN_TEXT + ("; bar = min..max of the dots" if several else "")))
    if several or any_hollow:
        handles.append(Line2D([], [], color="0.3", marker="o", ls="", ms=4, alpha=0.75,
                              label=DOT_TEXT if any_hollow else "one seed"))
    if any_pinned:
        handles.append(Line2D([], [], color="0.3", marker="x", ls="", ms=8, mew=2, label=X_TEXT))
    rows_leg = 0
    if handles:
        ncol = min(1 if any(len(h.get_label()) > 45 for h in handles) else 4, len(handles))
        fig.legend(handles=handles, loc="lower center", ncol=ncol, framealpha=0.9)
        rows_leg = (len(handles) + ncol - 1) // ncol
    by = (" by %s" % ", ".join(sweep.short(a) for a in lay.others)) if lay.others else ""
    no_mean = "; no sweep summary, so no mean" if several and sweep.summary_source is None else ""
    fig.suptitle(textwrap.fill("sweep %s: %s per %s%s (%d run%s%s)" % (
        sweep.label, "best val loss" if panels[0][0] == "best_val_loss" else "final train loss",
        sweep.short(axes.cat), by, len(pts), "" if len(pts) == 1 else "s", no_mean), 100))
    fig.tight_layout(rect=(0, min(0.3, (0.3 * rows_leg + 0.1) / fig.get_figheight()) if rows_leg else 0, 1, 1))
    return save(fig, os.path.join(outdir, "best_val_compare.png"))


def fig_profiles(sweep, cat_axis, key, first, fname, ylabel, what, outdir, logy):
    """A per-block series (layers.<key>) of each run's first or last record carrying it, against
    block index, every seed a line; colour = value of the categorical axis, line style = the other
    axes. None (nothing written) when no run logs the series."""
    import numpy as np
    plt = mpl()
    lay = CategoryLayout(sweep, cat_axis)
    cm = plt.get_cmap("tab10" if len(lay.cats) <= 10 else "tab20")
    lines, steps_used, several = [], set(), False
    for i, cat in enumerate(lay.cats):
        for j, g in enumerate(lay.groups):
            k = 0
            for p in lay.points(cat, g):
                if p["run"] is None:
                    continue
                st, row = p["run"].first_layer_row(key) if first else p["run"].last_layer_row(key)
                if row is not None and any(finite(v) for v in row):
                    lines.append((i, j, np.array(row, dtype=float)))
                    steps_used.add(st)
                    k += 1
            several |= k > 1
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(9.6, 5.6))
    allv = []
    for i, j, row in lines:
        ls, mk = STYLES[j % len(STYLES)]
        x = np.arange(row.size)
        ok = np.isfinite(row) & ((row > 0) if logy else True)
        ax.plot(x[ok], row[ok], ls=ls, marker=mk, color=cm(i % cm.N), lw=1.3, ms=4, alpha=0.8)
        allv += [float(v) for v in row[ok]]
    if logy and allv and min(allv) > 0:
        ax.set_yscale("log")
        readable_log(ax.yaxis, min(allv), max(allv))
    L = max(r.size for _, _, r in lines)
    ax.set_xticks(range(L) if L <= 24 else range(0, L, max(1, L // 12)))
    ax.set_xlabel("block index (0 = first block after the embedding)")
    ax.set_ylabel(ylabel)
    from matplotlib.lines import Line2D
    used_i = sorted({i for i, _, _ in lines})
    used_j = sorted({j for _, j, _ in lines})
    handles = [Line2D([], [], color=cm(i % cm.N), lw=2, label=lay.cat_label(lay.cats[i])) for i in used_i]
    if len(lay.groups) > 1:
        handles += [Line2D([], [], color="0.3", ls=STYLES[j % len(STYLES)][0], marker=STYLES[j % len(STYLES)][1],
                           lw=1.5, label=lay.group_label(lay.groups[j])) for j in used_j]
    ax.legend(handles=handles, loc="best", framealpha=0.85, ncol=2 if len(handles) > 7 else 1)
    st = sorted(steps_used)
    at = ("step %d" % st[0]) if len(st) == 1 else ("steps %d..%d" % (st[0], st[-1]))
    fig.suptitle(textwrap.fill("sweep %s: %s (%s; %s)" % (
        sweep.label, what, at, "every seed a line" if several else "one seed"), 100))
    fig.tight_layout()
    return save(fig, os.path.join(outdir, fname))


def fig_grad_profile_step0(sweep, axes, outdir):
    if axes.cat is None or sweep.tune is not None:  # a tuned sweep: tune_profiles.png instead
        return None
    return fig_profiles(sweep, axes.cat, "grad_norm", True, "grad_profile_step0.png",
                        "gradient norm of the block (L2, before clipping)",
                        "per-block gradient norm of the first logged update (Xiong et al. 2020, Fig. 3)",
                        outdir, logy=True)


def fig_block_cos_profile(sweep, axes, outdir):
    if axes.cat is None or sweep.tune is not None:  # a tuned sweep: tune_profiles.png instead
        return None
    return fig_profiles(sweep, axes.cat, "block_cos", False, "block_cos_profile.png",
                        "cos(stream entering, stream leaving) of the block",
                        "how much each block changes the residual stream, last diagnostic step", outdir, logy=False)


# ---- tuned comparisons (sweep tune:) -------------------------------------------------------------

def tune_arm_label(sweep, arm):
    """An arm's name with the summary's short names ("layout=pre"), or "(all)" without axes. A key
    after the first that is the first key's companion (each value of the first key comes with one
    value of it, as a zip group's: nGPT's pos and ffn beside its layout) is left out where it holds
    the value more than half of the arms share; any other key is shown on every arm."""
    _, arms = tune_arms(sweep)
    all_axes = [a["axes"] for a in arms if isinstance(a.get("axes"), dict)]
    common = majority_values(all_axes)
    axes = arm.get("axes") if isinstance(arm.get("axes"), dict) else {}
    keys = list(axes)

    def companion(k):
        seen = {}
        for a in all_axes:
            if keys and keys[0] in a and seen.setdefault(str(a[keys[0]]), str(a.get(k))) != str(a.get(k)):
                return False
        return True

    shown = [k for i, k in enumerate(keys) if i == 0 or str(axes[k]) != common.get(k) or not companion(k)]
    return ",".join("%s=%s" % (sweep.short(k), axes[k]) for k in shown) or "(all)"


def majority_values(dicts):
    """{key: the value (as text) more than half of the dicts hold} for every key any of them has;
    a missing key counts as a value of its own ('None')."""
    common = {}
    for k in {k for d in dicts for k in d}:
        values = [str(d.get(k)) for d in dicts]
        top = max(set(values), key=values.count)
        if 2 * values.count(top) > len(values):
            common[k] = top
    return common


def tune_arms(sweep):
    t = sweep.tune
    if not isinstance(t, dict) or not isinstance(t.get("arms"), list):
        return None, []
    return t, [a for a in t["arms"] if isinstance(a, dict)]


def tune_rungs(t):
    """The ladder's rungs as the summary lists them ([None] without a ladder)."""
    rungs = t.get("rungs") if t.get("ladder") else None
    return rungs if isinstance(rungs, list) and rungs else [None]


def same_rung(arm, rung):
    return rung is None or str(arm.get("rung")) == str(num(rung) if finite(num(rung)) else rung) or \
        (finite(num(arm.get("rung"))) and num(arm.get("rung")) == num(rung))


def arm_label(sweep, t, arm):
    """The arm's label: its stem (the arm across rungs) on a ladder, else its name."""
    if t.get("ladder"):
        stem = arm.get("stem") or ""
        return ",".join(sweep.short(p.split("=")[0]) + "=" + p.split("=", 1)[1] for p in stem.split(",") if "=" in p) \
            or "(all)"
    return tune_arm_label(sweep, arm)


def deciding(t, vs):
    """The deciding test's (delta, ci, p) of a vs_baseline: the paired one under tune.test: paired."""
    src = vs.get("paired") if t.get("test") == "paired" and isinstance(vs.get("paired"), dict) else vs
    ci = src.get("ci") if isinstance(src.get("ci"), list) and len(src.get("ci")) == 2 else None
    lo, hi = (num(ci[0]), num(ci[1])) if ci else (float("nan"), float("nan"))
    return num(src.get("delta")), lo, hi, num(src.get("p"))


def fig_tune_basin(sweep, axes, outdir):
    """m(v) against v (log x), one line per arm, the selected value v* marked: tune.arms[] of the
    summary (values, search, selected, at_edge, l0). A ladder: one file per searched rung."""
    t, arms = tune_arms(sweep)
    if not arms:
        return None
    written = None
    for rung in tune_rungs(t):
        cell_arms = [a for a in arms if same_rung(a, rung) and a.get("search")]
        if not cell_arms:
            continue
        fname = "tune_basin.png" if rung is None else "tune_basin_%s=%s.png" % (sweep.short(t["ladder"]), fmt_num(num(rung)) if finite(num(rung)) else rung)
        w = draw_basin(sweep, t, cell_arms, rung, os.path.join(outdir, fname))
        written = written or w
    return written


def draw_basin(sweep, t, arms, rung, path):
    plt = mpl()
    key = t.get("key", "?")
    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap("tab10")
    drawn, ticks = 0, []
    for i, arm in enumerate(arms):
        xs = [num(v) for v in arm.get("values") or []]
        ys = [num(v) for v in arm.get("search") or []]
        if not xs or len(xs) != len(ys):
            continue
        c = cmap(i % cmap.N)
        ls, mk = STYLES[i % len(STYLES)]
        label = arm_label(sweep, t, arm)
        sel = num(arm.get("selected"))
        if finite(sel):
            label += " (%s* = %s%s)" % (sweep.short(key), fmt_num(sel), ", at the grid's edge" if arm.get("at_edge") else "")
        label += "; l0 %.3f, sensitivity %.3f" % (num(arm.get("l0")), num(arm.get("sensitivity")))
        ax.plot(xs, ys, color=c, ls=ls, marker=mk, lw=1.6, ms=5, label=label)
        drawn += 1
        if finite(sel) and sel in xs:
            ax.plot([sel], [ys[xs.index(sel)]], color=c, marker="*", ms=16, mec="black", ls="none")
        ticks = xs
    if not drawn:
        plt.close(fig)
        note("%s: the tuned sweep has no search values to draw yet" % sweep.path)
        return None
    ax.set_xscale("log")
    ax.set_xticks(ticks)  # the grid's values, as the summary lists them
    ax.set_xticklabels([fmt_num(v) for v in ticks])
    from matplotlib.ticker import NullFormatter
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(key + " (log scale; ticks at the grid's values)")
    ax.set_ylabel("m(v): mean %s over the search seeds" % t.get("metric", "metric"))
    ax.plot([], [], color="black", marker="*", ms=12, ls="none", label="selected value v* (lowest m(v))")
    ax.legend(loc="best", framealpha=0.85, fontsize=8)
    ax.grid(True, alpha=0.3)
    where = "" if rung is None else " at %s = %s" % (t["ladder"], rung)
    fig.suptitle(textwrap.fill("sweep %s: search basin of %s per arm%s (seeds %s; l0: mean step-0 eval loss, what a "
                               "failed or non-finite run counts as)" % (
        sweep.label, key, where, ", ".join(str(x) for x in t.get("seeds") or [])), 75))
    fig.tight_layout()
    return save(fig, path)


VERDICT_COLOURS = {"better": "tab:green", "worse": "tab:red", "tie": "0.35", "baseline": "black",
                   "equivalent": "tab:blue", "inconclusive": "0.55"}


def fig_tune_forest(sweep, axes, outdir):
    """Each arm's confirm-run difference to the baseline, Delta with its 95 % interval (the deciding
    test's), a vertical line at 0, one panel per rung of a ladder: tune.arms[].vs_baseline of the
    summary. Numbers carry the digits their interval supports (vs_baseline.digits); an arm that
    learned nothing (at_entropy: at the unigram entropy) is drawn as an arrow at the edge with its
    numbers, so it does not set the axis."""
    t, arms = tune_arms(sweep)
    if not arms:
        return None
    panels = []
    for rung in tune_rungs(t):
        rows = []
        for arm in arms:
            if not same_rung(arm, rung):
                continue
            vs = arm.get("vs_baseline") if isinstance(arm.get("vs_baseline"), dict) else {}
            verdict = vs.get("verdict") or "pending"
            if verdict == "baseline" or finite(deciding(t, vs)[0]):
                rows.append((arm, vs, verdict))
        if any(finite(deciding(t, vs)[0]) for _a, vs, _v in rows):
            panels.append((rung, rows))
    if not panels:
        note("%s: no confirm comparison to draw yet (verdicts pending)" % sweep.path)
        return None
    plt = mpl()
    n_rows = 0
    for _rung, r in panels:
        n_rows += len(r)
    fig, axs = plt.subplots(len(panels), 1, figsize=(10, 1.4 + 0.55 * n_rows + 0.6 * len(panels)), squeeze=False,
                            gridspec_kw={"height_ratios": [max(1, len(r)) for _rung, r in panels]})
    test = "paired t" if t.get("test") == "paired" else "Welch"
    for ax, (rung, rows) in zip(axs[:, 0], panels):
        # The axis spans the arms that learned something; the summary marks the others (at_entropy).
        reach = []
        for arm, vs, _verdict in rows:
            d, lo, hi, _p = deciding(t, vs)
            if finite(d) and not arm.get("at_entropy"):
                reach += [abs(x) for x in (d, lo, hi) if finite(x)]
        span = max(reach) * 1.15 if reach and max(reach) > 0 else 1.0
        labels = []
        for y, (arm, vs, verdict) in enumerate(rows):
            c = VERDICT_COLOURS.get(verdict, "tab:blue")
            sel = num(arm.get("selected"))
            moved = (" (given)" if arm.get("given") else " (from %s)" % fmt_num(num(arm.get("from_rung")))
                     if arm.get("transferred") else "")
            labels.append("%s\n%s* = %s%s" % (arm_label(sweep, t, arm), sweep.short(t.get("key", "?")), fmt_num(sel), moved))
            if verdict == "baseline":
                ax.plot([0], [y], marker="D", color=c, ms=7, ls="none")
                ax.text(1.01, y, "baseline", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
                continue
            d, lo, hi, p = deciding(t, vs)
            dec = int(num(vs.get("digits"))) if finite(num(vs.get("digits"))) else 4
            far = bool(arm.get("at_entropy")) or max(abs(x) for x in (d, lo, hi) if finite(x)) > span
            text = "%s  Δ %+.*f" % (verdict, dec, d)
            text += "  [%+.*f, %+.*f]" % (dec, lo, dec, hi) if finite(lo) else "  (unbounded: one seed)"
            # second line: what the test says (p to 2 significant digits, as the report prints it)
            second = []
            mde = num(vs.get("mde"))
            if finite(mde) and verdict in ("tie", "inconclusive", "equivalent"):
                second.append("mde %.*f" % (dec, mde))
            if finite(p):
                second.append("p %.2g" % p)
            padj = num(vs.get("p_adj"))
            if finite(padj):
                second.append("p_adj %.2g" % padj)
            text += ("\n" + "  ".join(second)) if second else ""
            if far:  # off the scale: an arrow at the edge it lies beyond
                edge = span if d > 0 else -span
                ax.annotate("", xy=(edge, y), xytext=(edge * 0.8, y),
                            arrowprops=dict(arrowstyle="->", color=c, lw=2))
                text += "  (off the scale: learned nothing)" if arm.get("at_entropy") else "  (off the scale)"
            else:
                if finite(lo) and finite(hi):
                    ax.plot([lo, hi], [y, y], color=c, lw=2.5, solid_capstyle="butt")
                ax.plot([d], [y], marker="o", color=c, ms=8, ls="none")
            ax.text(1.01, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8, color=c)
        ax.axvline(0, color="black", lw=1)
        margin = num(t.get("margin"))
        if finite(margin) and margin > 0:
            ax.axvspan(-margin, margin, color="tab:blue", alpha=0.08, lw=0)
        ax.set_xlim(-span, span)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.invert_yaxis()
        ax.grid(True, axis="x", alpha=0.3)
        if rung is not None:
            ax.set_title("%s = %s" % (t["ladder"], rung), fontsize=9, loc="left")
    axs[-1, 0].set_xlabel(textwrap.fill("Δ %s: arm - baseline, confirm runs (95 %% interval, %s, not adjusted for the "
                                        "number of arms%s); < 0: lower loss than the baseline" % (
                                            t.get("metric", "metric"), test,
                                            "; shaded: the equivalence margin" if num(t.get("margin")) > 0 else ""), 70),
                          fontsize=9)
    fig.suptitle(textwrap.fill("sweep %s: each arm at its own %s against the baseline (confirm seeds %s)" % (
        sweep.label, t.get("key", "?"), ", ".join(str(x) for x in t.get("confirm_seeds") or [])), 90))
    fig.tight_layout()
    fig.subplots_adjust(right=0.62)
    return save(fig, os.path.join(outdir, "tune_forest.png"))


def fig_tune_ladder(sweep, axes, outdir):
    """The verdict against size: each arm's Δ with its 95 % interval (the deciding test's) against
    the ladder's value (log x), one line per arm, the baseline at 0; filled markers where the
    verdict is better or worse, hollow where it is not; an arm that learned nothing at a rung (the
    summary's at_entropy) pinned at the top instead of setting the axis."""
    t, arms = tune_arms(sweep)
    if not arms or not t.get("ladder"):
        return None
    stems = []
    for a in arms:
        if a.get("stem") not in stems and (a.get("vs_baseline") or {}).get("verdict") != "baseline":
            stems.append(a.get("stem"))
    series = []
    for stem in stems:
        pts = []
        for a in arms:
            if a.get("stem") != stem:
                continue
            vs = a.get("vs_baseline") if isinstance(a.get("vs_baseline"), dict) else {}
            d, lo, hi, _p = deciding(t, vs)
            pts.append((num(a.get("rung")), d, lo, hi, vs.get("verdict"), bool(a.get("at_entropy"))))
        series.append((arm_label(sweep, t, {"stem": stem}), pts))
    title = "sweep %s: verdict against %s (%s test, confirm seeds %s)" % (
        sweep.label, t["ladder"], t.get("test", "welch"), ", ".join(str(x) for x in t.get("confirm_seeds") or []))
    return draw_verdict_ladder(series, t["ladder"], t.get("metric", "metric"), num(t.get("margin")),
                               t.get("correction", "holm"), [num(r) for r in t.get("rungs") or []], title,
                               os.path.join(outdir, "tune_ladder.png"))


def draw_verdict_ladder(series, key, metric, margin, correction, rungs, title, path):
    """Draws the verdict against size: series = [(label, [(rung, Δ, lo, hi, verdict, at_entropy)])],
    a line per arm through its Δ at each rung (log x), the interval a bar, the marker filled where
    the verdict is better / worse; points of an arm that learned nothing are pinned at the top as
    triangles and do not set the y axis. None when nothing is drawable."""
    plt = mpl()
    fig, ax = plt.subplots(figsize=(11, 5.2))
    cmap = plt.get_cmap("tab10")
    drawn, stuck_drawn, n = 0, False, len(series)
    for i, (label, pts) in enumerate(series):
        pts = sorted(p for p in pts if finite(p[0]) and (finite(p[1]) or p[5]))
        if not pts:
            continue
        c = cmap(i % cmap.N)
        # the arms side by side at each rung, a little apart, so that the intervals do not overlap
        shift = 2 ** (0.04 * (i - (n - 1) / 2))
        labelled = False  # the line breaks at a rung where the arm learned nothing
        for stuck_run, run in itertools.groupby(pts, key=lambda p: p[5]):
            if not stuck_run:
                run = list(run)
                ax.plot([p[0] * shift for p in run], [p[1] for p in run], color=c, lw=1.4,
                        label=None if labelled else label)
                labelled = True
        for x0, d, lo, hi, verdict, _stuck in (p for p in pts if not p[5]):
            x = x0 * shift
            if finite(lo) and finite(hi):
                ax.plot([x, x], [lo, hi], color=c, lw=2)
            decided = verdict in ("better", "worse")
            ax.plot([x], [d], marker="o", ms=7, color=c, mfc=c if decided else "white", mec=c, ls="none")
        stuck = [p[0] * shift for p in pts if p[5]]
        if stuck:
            clip_top(ax, stuck, c, marker="^", size=70)
            stuck_drawn = True
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(0, color="black", lw=1, label="baseline")
    if finite(margin) and margin > 0:
        ax.axhspan(-margin, margin, color="tab:blue", alpha=0.08, lw=0, label="equivalence margin ±%g" % margin)
    rungs = [r for r in rungs if finite(r)]
    ax.set_xscale("log")
    if rungs:
        ax.set_xticks(rungs)
        ax.set_xticklabels([fmt_num(r) for r in rungs])
        from matplotlib.ticker import NullFormatter
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("%s (log scale)" % key)
    ax.set_ylabel("Δ %s against the baseline (95 %% interval)" % metric)
    ax.plot([], [], marker="o", color="0.3", ls="none", label="filled: better / worse (after %s)" % (
        {"holm": "Holm", "mixed": "each sweep's correction"}.get(correction, "no correction")))
    ax.plot([], [], marker="o", color="0.3", mfc="white", ls="none", label="hollow: no verdict either way")
    if stuck_drawn:
        ax.plot([], [], marker="^", color="0.3", ls="none", label="at the top: learned nothing (unigram entropy)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.85, borderaxespad=0)
    ax.grid(True, alpha=0.3)
    fig.suptitle(textwrap.fill(title, 95))
    fig.tight_layout()
    return save(fig, path)


def join_tables(tables):
    """Several sweeps' summary.md tables (read_tuned_md) joined: each table a (file, rows); a later
    file's row replaces an earlier one's at the same arm and rung. Returns (files, arms, cells,
    label): the arms in first-seen order (baselines included), cells[(arm, rung)] the row, and
    label(arm) the arm's name less a key=value that most non-baseline arms share (tune_arm_label's
    majority rule without its companion test: a joined key such as `type` stays hidden). One arm may carry two names: a sweep without an axis leaves its key out of the
    names ("layout=sandwich" where another sweep says "layout=sandwich,type=sp"), so a name stands
    for the one longest name it agrees with (a key in common, equal values on every common key); a
    name that agrees with two such (baselines counted) stands for the one of them in its own role
    (baseline or compared arm), and is kept apart where that is not one."""
    def kv(arm):
        return dict(p.split("=", 1) for p in arm.split(",") if "=" in p)

    def agree(a, b):
        common = set(kv(a)) & set(kv(b))
        return bool(common) and all(kv(a)[k] == kv(b)[k] for k in common)
    names = {r["arm"] for _n, rows in tables for r in rows}
    bases = sorted({r["arm"] for _n, rows in tables for r in rows if r["verdict"] == "baseline"})
    canon = {}
    for arm in names:
        fits = [o for o in names if agree(arm, o)]
        longest = [o for o in fits if len(kv(o)) == max(len(kv(f)) for f in fits)]
        if len(longest) > 1:  # a baseline's short name stands for the baseline it agrees with
            longest = [o for o in longest if (o in bases) == (arm in bases)]
        canon[arm] = longest[0] if len(longest) == 1 else arm
    if any(not agree(a, b) for a in bases for b in bases if a != b):
        note("--join: the tables' baselines differ (%s): each Δ is against its own table's" % "; ".join(bases))
    cells, arms, files = {}, [], []
    for name, rows in tables:
        files.append(name)
        for r in rows:
            arm = canon[r["arm"]]
            if arm not in arms:
                arms.append(arm)
            cells[(arm, r["rung"])] = r
    baseline = {a for (a, _r), row in cells.items() if row["verdict"] == "baseline"}
    common = majority_values([kv(a) for a in arms if a not in baseline])

    def label(arm):
        shown = [(k, v) for j, (k, v) in enumerate(kv(arm).items()) if j == 0 or common.get(k) != v]
        return ",".join("%s=%s" % x for x in shown) or arm
    return files, arms, cells, label


def fig_joined_ladder(tables, key, path):
    """The verdict against size joined from several sweeps' summary.md tables (join_tables)."""
    files, arms, cells, label = join_tables(tables)
    series, rungs = [], set()
    for arm in arms:
        pts = [(num(rung), r["delta"], r["lo"], r["hi"], r["verdict"], r["at_entropy"])
               for (a, rung), r in cells.items() if a == arm and r["verdict"] != "baseline"]
        if not pts:
            continue
        rungs.update(p[0] for p in pts)
        series.append((label(arm), pts))
    title = "verdict against %s, from %s (the rows as each summary.md prints them)" % (key, ", ".join(files))

    def shared(field):  # a setting every table agrees on, else None
        values = {str(r[field]) for r in cells.values() if r["verdict"] != "baseline"}
        return next(iter(values)) if len(values) == 1 else None
    margin = num(shared("margin"))
    correction = {"True": "holm", "False": "none"}.get(shared("holm"), "mixed")
    return draw_verdict_ladder(series, key, shared("metric") or "metric", margin, correction, sorted(rungs),
                               title, path)


def fig_joined_rates(tables, key, path):
    """The value each arm selected against size, joined from several sweeps' summary.md tables
    (join_tables), the baseline included: the transfer audit of rungs that ran as separate sweeps,
    one line per arm (log-log). The marker says where the value came from: filled, searched at that
    rung; hollow, the grid's first or last value (edge); x, carried from another rung (a ladder's
    transferred value); a hollow square, a value tune.given set (chosen outside the sweep); a triangle, an arm that learned nothing there (its selection is noise, so
    no line runs through it). No slope is drawn: each sweep's own report gives its transfer audit."""
    files, arms, cells, label = join_tables(tables)
    tuned = sorted({r["tuned"] for r in cells.values() if r.get("tuned")})
    # the colours of the verdict figure: an arm's by its place among the arms with a verdict, the
    # baseline's black
    compared = [a for a in arms if any(r["verdict"] != "baseline" for (b, _r), r in cells.items() if b == a)]
    plt = mpl()
    fig, ax = plt.subplots(figsize=(11, 5.2))
    cmap = plt.get_cmap("tab10")
    rungs, drawn, n = set(), 0, len(arms)
    kinds = set()
    for i, arm in enumerate(arms):
        pts = sorted(((num(rung), r) for (a, rung), r in cells.items()
                      if a == arm and finite(num(rung)) and finite(r["selected"]) and r["selected"] > 0),
                     key=lambda p: p[0])
        if not pts:
            continue
        base = any(r["verdict"] == "baseline" for _x, r in pts)
        c = cmap(compared.index(arm) % cmap.N) if arm in compared else "black"  # else: only baseline rows
        shift = 2 ** (0.03 * (i - (n - 1) / 2))  # equal rates of two arms side by side, not on top
        name = label(arm) + (" (baseline)" if base else "")
        labelled = False
        for stuck, run in itertools.groupby(pts, key=lambda p: p[1]["at_entropy"]):
            run = list(run)
            if not stuck:
                ax.plot([x * shift for x, _r in run], [r["selected"] for _x, r in run], color=c,
                        lw=2.2 if base else 1.4, label=None if labelled else name)
                labelled = True
        for x, r in pts:
            rungs.add(x)
            if r["at_entropy"]:
                kind = dict(marker="^", mfc="white")
            elif r["from_rung"] == "given":
                kind = dict(marker="s", mfc="white")
            elif r["from_rung"]:
                kind = dict(marker="x", mfc=c)
            elif r["edge"]:
                kind = dict(marker="o", mfc="white")
            else:
                kind = dict(marker="o", mfc=c)
            kinds.add((kind["marker"], kind["mfc"] == "white"))
            ax.plot([x * shift], [r["selected"]], ms=7, color=c, mec=c, ls="none", **kind)
        if not labelled:
            ax.plot([], [], color=c, lw=1.4, label=name)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_yscale("log")
    rungs = sorted(rungs)
    ax.set_xticks(rungs)
    ax.set_xticklabels([fmt_num(r) for r in rungs])
    from matplotlib.ticker import NullFormatter
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("%s (log scale)" % key)
    ax.set_ylabel("selected %s (log scale)" % (" / ".join(tuned) or "value"))
    for (marker, hollow), text in ((("o", False), "searched at that rung"),
                                   (("o", True), "hollow: the grid's edge (widen it)"),
                                   (("x", False), "x: carried from another rung"),
                                   (("s", True), "square: given (chosen outside the sweep)"),
                                   (("^", True), "triangle: learned nothing there")):
        if (marker, hollow) in kinds:
            ax.plot([], [], marker=marker, color="0.3", mfc="white" if hollow else "0.3", ls="none", label=text)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.85, borderaxespad=0)
    ax.grid(True, alpha=0.3)
    fig.suptitle(textwrap.fill("the value each arm selected against %s, from %s (the rows as each summary.md "
                               "prints them; a flat line: the value carries over %s)"
                               % (key, ", ".join(files), key), 95))
    fig.tight_layout()
    return save(fig, path)


def fig_tune_transfer(sweep, axes, outdir):
    """Does the optimum move with size? A ladder with a transfer audit or fits at two or more rungs
    (tune.transfer[]): one panel per arm with m(v) against v, one line per searched rung (a rung
    that ran no search: its confirm seeds' means over the fit's bracket, dashed), each rung's
    optimum marked (the fitted one with its bootstrap interval where tune.fit is quadratic, else
    v*); and a last panel with each arm's optimum against the ladder's value (log-log), its slope
    from the summary."""
    t, arms = tune_arms(sweep)
    transfer = t.get("transfer") if t else None
    if not arms or not t.get("ladder") or not isinstance(transfer, list) or not transfer:
        return None
    plt = mpl()
    key, ladder = t.get("key", "?"), t["ladder"]
    n = len(transfer) + 1
    # at most four panels a row: seven arms and the optimum panel in one row were 4000 px wide
    ncols = min(n, 4)
    nrows = (n + ncols - 1) // ncols
    fig, axs = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 4.2 * nrows + 0.9), squeeze=False)
    flat = [a for row in axs for a in row]
    for extra in flat[n:]:
        extra.set_visible(False)
    rungs = [r for r in tune_rungs(t) if r is not None]
    cmap = plt.get_cmap("viridis")
    colour = {str(r): cmap(i / max(1, len(rungs) - 1) * 0.9) for i, r in enumerate(rungs)}
    from matplotlib.ticker import NullFormatter
    for k, tr in enumerate(transfer):
        ax = flat[k]
        stem = tr.get("stem")
        fits = {str(f.get("rung")): f for f in tr.get("fitted") or [] if isinstance(f, dict)}
        confirm_only = False
        for a in arms:
            if a.get("stem") != stem:
                continue
            c = colour.get(str(a.get("rung")), "0.3")
            fit = a.get("fit") if isinstance(a.get("fit"), dict) else {}
            if a.get("search"):
                xs = [num(v) for v in a.get("values") or []]
                ys = [num(v) for v in a.get("search") or []]
                ax.plot(xs, ys, color=c, marker="o", ms=3.5, lw=1.4,
                        label="%s = %s" % (sweep.short(ladder), a.get("rung")))
            elif fit.get("points") and fit.get("means"):
                # A rung that ran no search (its rate carried): the confirm seeds' means over the
                # fit's bracket, the only curve it has.
                confirm_only = True
                xs = [num(v) for v in fit["points"]]
                ys = [num(v) for v in fit["means"]]
                ax.plot(xs, ys, color=c, marker="o", mfc="white", ms=4.5, lw=1.4, ls="--",
                        label="%s = %s: confirm means (%s)"
                        % (sweep.short(ladder), a.get("rung"), "given" if a.get("given")
                           else "carried from %s" % a.get("from_rung", "?")))
            else:
                continue
            sel = num(a.get("selected"))
            if finite(sel) and sel in xs:
                ax.plot([sel], [ys[xs.index(sel)]], color=c, marker="*", ms=13, mec="black", ls="none")
            f = fits.get(str(a.get("rung")))
            if f and finite(num(f.get("value"))):
                ax.axvline(num(f.get("value")), color=c, lw=1, ls="--")
                if finite(num(f.get("low"))) and finite(num(f.get("high"))):
                    ax.axvspan(num(f.get("low")), num(f.get("high")), color=c, alpha=0.12, lw=0)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(key + " (log)")
        ax.set_ylabel(("%s: search seeds' mean (solid), confirm seeds' (dashed)" if confirm_only
                       else "m(v): mean %s over the search seeds") % t.get("metric", "metric"))
        ax.set_title(arm_label(sweep, t, {"stem": stem}), fontsize=10)
        ax.legend(fontsize=7.5, title="star: v*; dashed: fitted optimum" if fits else "star: v*", title_fontsize=7.5)
    ax = flat[n - 1]
    tab = plt.get_cmap("tab10")
    for k, tr in enumerate(transfer):
        fitted = [f for f in tr.get("fitted") or [] if isinstance(f, dict) and finite(num(f.get("value")))]
        c = tab(k % tab.N)
        label = arm_label(sweep, t, {"stem": tr.get("stem")})
        if fitted:
            xs = [num(f.get("rung")) for f in fitted]
            ys = [num(f.get("value")) for f in fitted]
            ax.plot(xs, ys, color=c, marker="o", lw=1.6,
                    label="%s: fitted, slope %s" % (label, fmt_slope(tr.get("fitted_slope"), tr.get("fitted_slope_low"),
                                                                        tr.get("fitted_slope_high"))))
            for x, f in zip(xs, fitted):
                if finite(num(f.get("low"))) and finite(num(f.get("high"))):
                    ax.plot([x, x], [num(f.get("low")), num(f.get("high"))], color=c, lw=2.5, alpha=0.6)
        sel = [e for e in tr.get("searched") or [] if isinstance(e, dict) and finite(num(e.get("selected")))]
        if sel:
            ax.plot([num(e.get("rung")) for e in sel], [num(e.get("selected")) for e in sel], color=c,
                    marker="*", ms=10, ls=":" if fitted else "-", lw=1.2,
                    label=("%s: grid v*, slope %s" % (label, fmt_slope(tr.get("slope"))) if len(sel) >= 2
                           else "%s: grid v* (searched here only)" % label))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    xr = [num(r) for r in rungs if finite(num(r))]
    if xr:
        ax.set_xticks(xr)
        ax.set_xticklabels([fmt_num(r) for r in xr])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("%s (log)" % ladder)
    ax.set_ylabel("optimum %s (log)" % key)
    ax.set_title("optimum against %s\n(slope -1: falls in proportion; 0: transfers)" % sweep.short(ladder), fontsize=9)
    ax.margins(y=0.12)  # a star at the grid's end stays inside the axes
    # Below the axes: the arms' labels are long, and inside they cover the optima they describe.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.suptitle(textwrap.fill("sweep %s: does the optimal %s move with %s?" % (sweep.label, key, ladder), 90))
    fig.tight_layout()
    return save(fig, os.path.join(outdir, "tune_transfer.png"))


def fig_tune_fit(sweep, axes, outdir):
    """Which arm's optimum sits where? A tuned sweep without a ladder, with tune.fit: quadratic
    (a ladder gets tune_transfer.png instead). Left: per arm the confirm seeds' means over the fit's
    bracket (tune.arms[].fit.points / means), the fitted optimum (the minimum over the bracket of
    the parabola through them in log2 of the value, the summary's) a vertical line; the search
    seeds' m(v) faint beside them. Right: each arm's fitted optimum with its 95 % bootstrap
    interval over the confirm seeds (log x), the baseline's interval shaded across the panel, so
    that an arm whose interval leaves the band has moved its optimum. Hollow: the optimum sits at an end of the bracket (the metric
    still falls beyond it)."""
    t, arms = tune_arms(sweep)
    if not arms or not t.get("fit") or t.get("ladder"):
        return None
    fitted = [a for a in arms if isinstance(a.get("fit"), dict) and finite(num(a["fit"].get("value")))
              and len(a["fit"].get("points") or []) == len(a["fit"].get("means") or []) >= 3]
    if not fitted:
        return None
    plt = mpl()
    key = t.get("key", "?")
    from matplotlib.ticker import NullFormatter
    fig, (ax, axo) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.35, 1]})
    cmap = plt.get_cmap("tab10")
    base_fit = None
    ticks = set()
    for i, arm in enumerate(fitted):
        c = cmap(i % cmap.N)
        fit = arm["fit"]
        label = arm_label(sweep, t, arm)
        xs = [num(v) for v in fit["points"]]
        ys = [num(v) for v in fit["means"]]
        ticks.update(xs)
        if arm.get("search") and len(arm.get("values") or []) == len(arm["search"]):
            ax.plot([num(v) for v in arm["values"]], [num(v) for v in arm["search"]], color=c, lw=0.8,
                    ls=":", alpha=0.6)
        ax.plot(xs, ys, color=c, marker="o", ms=5, lw=1.4, label=label)
        ax.axvline(num(fit.get("value")), color=c, lw=1.2, ls=(0, (1, 1)) if fit.get("at_edge") else "--")
        if (arm.get("vs_baseline") or {}).get("verdict") == "baseline":
            base_fit = fit
    ax.set_xscale("log")
    ax.set_xticks(sorted(ticks))
    ax.set_xticklabels([fmt_num(v) for v in sorted(ticks)])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(key + " (log scale)")
    ax.set_ylabel("mean %s over the confirm seeds" % t.get("metric", "metric"))
    ax.plot([], [], color="0.3", lw=1.2, ls="--", label="fitted optimum (dotted: at the bracket's end)")
    ax.plot([], [], color="0.3", lw=0.8, ls=":", label="search m(v), seeds %s" % ", ".join(str(s) for s in t.get("seeds") or []))
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.13), fontsize=7.5, frameon=False, ncol=2)
    ax.grid(True, alpha=0.3)
    ax.set_title("the confirm seeds' means over each arm's bracket", fontsize=9)
    n = len(fitted)
    if base_fit is not None and finite(num(base_fit.get("low"))) and finite(num(base_fit.get("high"))):
        axo.axvspan(num(base_fit["low"]), num(base_fit["high"]), color="0.5", alpha=0.15, lw=0,
                    label="the baseline's interval")
    for i, arm in enumerate(fitted):
        c = cmap(i % cmap.N)
        fit, y = arm["fit"], n - 1 - i
        v, lo, hi = num(fit.get("value")), num(fit.get("low")), num(fit.get("high"))
        if finite(lo) and finite(hi):
            axo.plot([lo, hi], [y, y], color=c, lw=2.5)
        axo.plot([v], [y], color=c, marker="D", ms=8, mec="black", mfc="white" if fit.get("at_edge") else c, ls="none")
        text = "%s [%s, %s]" % (fmt_sig(v), fmt_sig(lo), fmt_sig(hi)) if finite(lo) and finite(hi) else fmt_sig(v)
        axo.annotate(text, (v, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=8)
    axo.set_yticks(range(n))
    axo.set_yticklabels([textwrap.fill(arm_label(sweep, t, a).replace(",", ", "), 30) for a in reversed(fitted)],
                        fontsize=7.5)
    axo.set_ylim(-0.6, n - 0.3)
    axo.set_xscale("log")
    axo.xaxis.set_minor_formatter(NullFormatter())
    axo.set_xticks(sorted(ticks))
    axo.set_xticklabels([fmt_num(v) for v in sorted(ticks)])
    axo.set_xlabel("fitted optimum %s (log),\n95 %% bootstrap interval over the confirm seeds" % key, fontsize=8.5)
    axo.grid(True, axis="x", alpha=0.3)
    if base_fit is not None:
        axo.legend(loc="lower right", fontsize=7.5)
    fig.suptitle(textwrap.fill("sweep %s: each arm's fitted optimum of %s (tune.fit: quadratic in log2 %s through the "
                               "confirm seeds' means at v* and either side, its minimum over that bracket)"
                               % (sweep.label, key, sweep.short(key)), 110), fontsize=10)
    fig.tight_layout()
    return save(fig, os.path.join(outdir, "tune_fit.png"))


def fmt_sig(v):
    """A rate at 3 significant digits (3.29e-02 -> 0.0329)."""
    return "%.3g" % v if finite(v) else "-"


def fmt_slope(v, low=None, high=None):
    """A slope at 2 decimals, with its interval where the summary has one (paired resamples)."""
    if not finite(num(v)):
        return "-"
    if finite(num(low)) and finite(num(high)):
        return "%+.2f [%+.2f, %+.2f]" % (num(v), num(low), num(high))
    return "%+.2f" % num(v)


def fig_tune_profiles(sweep, axes, outdir):
    """Per-block diagnostics of the confirm runs at the last (deepest, widest) rung, each arm at its
    selected value: the gradient norm of every block at the first logged update and at the last
    diagnostic step (log y), and layers.block_cos at the last diagnostic step; every confirm seed a
    line, colour = arm; an arm that learned nothing (the summary's at_entropy) dashed and named so.
    None when the rung's confirm runs log no layers.* series."""
    import numpy as np
    t, arms = tune_arms(sweep)
    if not arms:
        return None
    rung = tune_rungs(t)[-1]
    cell = [a for a in arms if same_rung(a, rung) and finite(num(a.get("selected")))]
    key = t.get("key")
    panels = [("grad_norm", True, "gradient norm of the block, first logged update", True),
              ("grad_norm", False, "gradient norm of the block, last diagnostic step", True),
              ("block_cos", False, "cos(stream entering, stream leaving), last diagnostic step", False)]
    series = []  # (arm index, panel index, [rows])
    steps = {i: set() for i in range(len(panels))}
    for ai, a in enumerate(cell):
        prefix = (a.get("name") or "") + ","
        runs = [p["run"] for p in sweep.points
                if p["run"] is not None and p["name"].startswith(prefix) and ",confirm," in p["name"]
                and num(p["over"].get(key)) == num(a.get("selected"))]
        for pi, (k, first, _label, _logy) in enumerate(panels):
            rows = []
            for r in runs:
                st, row = r.first_layer_row(k) if first else r.last_layer_row(k)
                if row is not None and any(finite(v) for v in row):
                    rows.append(np.array(row, dtype=float))
                    steps[pi].add(st)
            if rows:
                series.append((ai, pi, rows))
    if not series:
        return None
    plt = mpl()
    fig, axs = plt.subplots(1, 3, figsize=(13.5, 5.2))
    cmap = plt.get_cmap("tab10")
    for ai, pi, rows in series:
        a = cell[ai]
        c = cmap(ai % cmap.N)
        ls = "--" if a.get("at_entropy") else "-"
        ax = axs[pi]
        for row in rows:
            ax.plot(np.arange(row.size), row, color=c, lw=1.1, alpha=0.55, ls=ls, marker="o", ms=2.5)
    L = max(max(r.size for r in rows) for _, _, rows in series)
    for pi, (k, first, label, logy) in enumerate(panels):
        ax = axs[pi]
        st = sorted(s for s in steps[pi] if s is not None)
        at = ("step %d" % st[0]) if len(st) == 1 else ("steps %d..%d" % (st[0], st[-1])) if st else ""
        ax.set_title(textwrap.fill("%s (%s)" % (label, at), 45), fontsize=10)
        if logy:
            ax.set_yscale("log")
        ax.set_xticks(range(L) if L <= 24 else range(0, L, max(1, L // 12)))
        ax.set_xlabel("block index (0 = first block after the embedding)")
        ax.grid(True, alpha=0.3)
    from matplotlib.lines import Line2D
    drawn = sorted({ai for ai, _, _ in series})
    handles = [Line2D([], [], color=cmap(ai % cmap.N), lw=2, ls="--" if cell[ai].get("at_entropy") else "-",
                      label="%s, %s = %s%s" % (arm_label(sweep, t, cell[ai]), sweep.short(key) if key else "?",
                                               fmt_num(num(cell[ai].get("selected"))),
                                               " (learned nothing)" if cell[ai].get("at_entropy") else ""))
               for ai in drawn]
    handles.append(Line2D([], [], color="0.3", lw=1.1, alpha=0.55, label="a line: one confirm seed"))
    fig.legend(handles=handles, loc="lower center", ncol=min(3, len(handles)), fontsize=8.5, frameon=False)
    where = "" if rung is None else " at %s = %s" % (t.get("ladder"), fmt_num(num(rung)) if finite(num(rung)) else rung)
    fig.suptitle(textwrap.fill("sweep %s: per-block diagnostics of the confirm runs%s, each arm at its selected %s" % (
        sweep.label, where, key), 110))
    rows_legend = (len(handles) + 2) // 3
    fig.tight_layout(rect=(0, 0.035 * rows_legend + 0.03, 1, 0.95))
    return save(fig, os.path.join(outdir, "tune_profiles.png"))


# (file name, function, what it needs): the order is the order of drawing.
SWEEP_FIGURES = [
    ("loss_curves.png", fig_loss_curves, "runs with metrics.jsonl"),
    ("final_vs_lr.png", fig_final_vs_lr, "optim.lr an axis with several values"),
    ("final_vs_depth.png", fig_final_vs_depth, "model.n_layers an axis with several values"),
    ("best_val_compare.png", fig_best_val_compare, "an axis with a value that is not a number (categorical)"),
    ("grad_profile_step0.png", fig_grad_profile_step0, "a categorical axis; runs logging layers.grad_norm"),
    ("block_cos_profile.png", fig_block_cos_profile, "a categorical axis; runs logging layers.block_cos"),
    ("tune_basin.png", fig_tune_basin, "a tuned sweep (tune:) with search results"),
    ("tune_forest.png", fig_tune_forest, "a tuned sweep with confirm results"),
    ("tune_ladder.png", fig_tune_ladder, "a tuned sweep with a ladder (tune.ladder) and confirm results"),
    ("tune_transfer.png", fig_tune_transfer, "a ladder searched at two or more rungs (the transfer audit)"),
    ("tune_fit.png", fig_tune_fit, "a tuned sweep without a ladder, with tune.fit: quadratic and confirm results"),
    ("tune_profiles.png", fig_tune_profiles, "a tuned sweep whose confirm runs log layers.grad_norm / block_cos"),
]


def plot_sweep(sweep, group_by, outdir, with_runs):
    """Every figure of SWEEP_FIGURES the sweep has what it needs for (and, with_runs, every run's
    own figures under outdir/runs/<name>/); the paths written."""
    if not sweep.points:
        note("%s: no runs found (no summary rows, no runs/*/point.json)" % sweep.path)
        return []
    axes = SweepAxes(sweep, group_by)
    written = []
    for _name, draw, _needs in SWEEP_FIGURES:
        w = draw(sweep, axes, outdir)
        if w:
            written.append(w)
    if with_runs:
        for p in sweep.points:
            if p["run"] is not None:
                written += plot_run(p["run"], os.path.join(outdir, "runs", p["name"]))
    return written
