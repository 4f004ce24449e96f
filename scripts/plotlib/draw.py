"""What the run and sweep figures share: matplotlib (Agg, headless), saving a PNG, readable log
axes, colours, per-block line plots, markers pinned to the top of an axis. Drawing only: the
numbers come from plotlib.read."""

import os

DPI = 100


def mpl():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "figure.titlesize": 12,
                         "legend.fontsize": 8.5, "axes.grid": True, "grid.alpha": 0.3,
                         "savefig.dpi": DPI})
    return plt


def save(fig, path):
    """Writes the figure as a PNG (256-colour palette when PIL is there), prints its path, returns it."""
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
    """Indices of the first, ~25%, 50% and last of the given steps (distinct): which records to draw."""
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


def clip_top(ax, xs, color, marker="x", size=60, label=None):
    """Draws markers at xs pinned near the top of the axes (values off the scale, or none at all)."""
    import matplotlib.transforms as mtransforms
    if not xs:
        return
    tr = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    ax.scatter(xs, [0.97] * len(xs), marker=marker, s=size, color=color, transform=tr, zorder=5,
               clip_on=False, label=label, linewidths=2)


def no_data_note(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.3")


def hline_label(ax, y, text, color="0.4", ls="--", left=True, fontsize=8):
    """A horizontal reference line at y with its label at the left (or right) end."""
    ax.axhline(y, color=color, ls=ls, lw=1)
    ax.text(0.01 if left else 0.99, y, (" " + text) if left else (text + " "), color=color, fontsize=fontsize,
            ha="left" if left else "right", va="bottom", transform=ax.get_yaxis_transform())
