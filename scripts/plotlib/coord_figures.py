"""coord_check.png of `normlab coordcheck` (src/train/README.md, "Coordinate check"): drawn from its
coord.json as written. A row per check (with --compare: sp, then the config's mode, per axis), a
column per drawn t (1, 2, the middle one and the last one of the updates): mean |x| against the
size, log-log, a line per module kind (a per-block module's line is the block its slope is of), its
slope from coord.json in the legend. coord_rate_split.png, where coord.json holds rate_splits
(`--lrs` with three rates or more): a row per split, a panel per module kind, each block's
first-order term (solid) and second-order term (dashed) at the largest rate against the size,
their slopes and intervals from coord.json in the legend."""

import json
import os

from .draw import mpl, save

# One colour per module kind, in coord.json's order.
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def drawn_steps(steps):
    """The t drawn: 1, 2, the middle and the last (a choice of panels, not a number shown)."""
    out = []
    for t in (1, 2, (steps + 1) // 2, steps):
        if 1 <= t <= steps and t not in out:
            out.append(t)
    return sorted(out)


def track_name(check, module, track):
    if not module["per_block"] or track is None or track < 0:
        return ""
    if check["axis"] == "width":
        return ", block %d" % track
    return ", %s block" % {1: "middle", 2: "last"}.get(track, str(track))


def slope_text(v):
    return "nan" if v is None else "%+.2f" % v


def interval_text(ci):
    """coord.json's 95 % interval over seeds, as written (none in files from before it was kept)."""
    if not ci or ci[0] is None or ci[1] is None:
        return ""
    return " [%+.2f, %+.2f]" % (ci[0], ci[1])


def draw_coord(path, out):
    with open(path) as f:
        data = json.load(f)
    checks = data.get("checks") or []
    if not checks:
        raise SystemExit("plot.py: %s: no checks in the coordinate check's JSON" % path)
    plt = mpl()
    cols = max(len(drawn_steps(c["steps"])) for c in checks)
    fig, axes = plt.subplots(len(checks), cols, figsize=(4.6 * cols, 3.9 * len(checks)), squeeze=False)
    for r, c in enumerate(checks):
        ts = drawn_steps(c["steps"])
        worst = c.get("worst_after_first") or {}
        for k in range(cols):
            ax = axes[r][k]
            if k >= len(ts):
                ax.axis("off")
                continue
            t = ts[k]
            for i, m in enumerate(c["modules"]):
                at = m["by_t"][t - 1]
                ys = [v if v is not None and v > 0 else float("nan") for v in at["curve"]]
                # Exactly 0 at every size (attention logits at init under init.zero_query): no point
                # on a log axis, said in the legend.
                zero = all(v == 0 for v in at["curve"])
                ax.plot(c["sizes"], ys, marker="o", ms=3.5, color=COLOURS[i % len(COLOURS)],
                        label="%s%s: %s" % (m["name"], track_name(c, m, at["track"]),
                                            "0 at every size" if zero else
                                            slope_text(at["slope"]) + interval_text(at.get("slope_ci"))))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xticks(c["sizes"])
            ax.set_xticklabels([str(s) for s in c["sizes"]])
            ax.set_xlabel(("d_model" + ("  (n_heads = d_model / %d)" % c["head_dim"] if c.get("head_dim") else ""))
                          if c["axis"] == "width" else "n_layers")
            if k == 0:
                ax.set_ylabel("%s over %s\nmean |x| (seed mean)" % (c["param"], c["axis"]))
            ax.set_title("t = %d" % t + (" (at init)" if t == 1 else ""))
            has_ci = any(interval_text(m["by_t"][t - 1].get("slope_ci")) for m in c["modules"])
            ax.legend(fontsize=6.5, title="module: slope [95 % of per-seed slopes]" if has_ci else
                      "module: slope", title_fontsize=7)
        est = c.get("established_after_first") or {}
        axes[r][0].annotate("largest |slope| at t >= 2: %s (%s, t = %s)%s" % (
            slope_text(worst.get("slope")), worst.get("module") or "-", worst.get("t"),
            "\nthe largest the seeds establish: %s (%s, t = %s)" % (
                "%.2f" % est["slope"], est.get("module"), est.get("t"))
            if est.get("slope") is not None else
            "\nthe largest the seeds establish: nan (%s, t = %s)" % (est.get("module"), est.get("t"))
            if est.get("module") and c.get("seeds", 0) >= 2 else ""),
            xy=(0, 1.11), xycoords="axes fraction", fontsize=8, annotation_clip=False)
    first = checks[0]
    fig.suptitle("coordinate check: %s at lr %.4g held, %d updates on one batch, %d seeds" % (
        first["optimizer"], first["lr"], first["steps"], first["seeds"]))
    fig.tight_layout()
    return save(fig, out)


# The panels of a rate split: the module kinds a reader compares (attn_logits_causal reads like
# attn_logits, embed and head_in have no second order).
SPLIT_MODULES = ["attn_out", "ffn_out", "attn_logits", "stream", "logits"]


def draw_rate_split(path, out):
    with open(path) as f:
        splits = json.load(f).get("rate_splits") or []
    if not splits:
        if os.path.exists(out):  # a figure of an earlier coord.json in the same folder
            os.remove(out)
        return None
    plt = mpl()
    cols = len(SPLIT_MODULES)
    fig, axes = plt.subplots(len(splits), cols, figsize=(4.4 * cols, 6.2 * len(splits)), squeeze=False)
    for r, sp in enumerate(splits):
        for k, name in enumerate(SPLIT_MODULES):
            ax = axes[r][k]
            rows = [row for row in sp["rows"] if row["module"] == name]
            for i, row in enumerate(rows):
                colour = COLOURS[i % len(COLOURS)]
                block = "" if row["track"] < 0 else ("block %d" % row["track"] if sp["axis"] == "width" else
                                                     {1: "middle", 2: "last"}.get(row["track"], str(row["track"])))
                for key, style, label in (("first", "-", "first"), ("second", "--", "second")):
                    ys = [v if v is not None and v > 0 else float("nan") for v in row[key]]
                    ax.plot(sp["sizes"], ys, style, marker="o", ms=3, color=colour,
                            label="%s %s: %s%s" % (block, label, slope_text(row[key + "_slope"]),
                                                   interval_text(row.get(key + "_slope_ci"))))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xticks(sp["sizes"])
            ax.set_xticklabels([str(v) for v in sp["sizes"]])
            ax.set_xlabel("d_model" if sp["axis"] == "width" else "n_layers")
            if k == 0:
                ax.set_ylabel("%s: term at lr %.4g\n(mean |x| at t = 2)" % (sp["param"], sp["lrs"][-1]))
            ax.set_title(name)
            # Below the panel: clear of the lines.
            ax.legend(fontsize=6.5, title="order: slope [95 %, bootstrap]", title_fontsize=7, loc="upper center",
                      bbox_to_anchor=(0.5, -0.16), ncol=2 if len(rows) > 2 else 1)
    first = splits[0]
    fig.suptitle("the first update by order in the rate (solid: a lr, dashed: b lr^2; v^2 = v1^2 + (a lr)^2 + "
                 "(b lr^2)^2 fitted over rates %s), %s, %d seeds" % (
                     ", ".join("%.4g" % v for v in first["lrs"]), first["optimizer"], first["seeds"]))
    fig.tight_layout()
    return save(fig, out)


def rate_split_png_path(path):
    return os.path.join(os.path.dirname(os.path.abspath(path)), "coord_rate_split.png")


def coord_png_path(path):
    return os.path.join(os.path.dirname(os.path.abspath(path)), "coord_check.png")
