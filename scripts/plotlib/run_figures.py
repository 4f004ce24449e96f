"""A run's figures: RUN_FIGURES is the table (file name, function, what it needs); plot_run draws
every entry whose series the run has. A function takes (run, outdir, head) and returns the paths
it wrote ([] when the run lacks what it needs).

The curves are the records' series (metrics.jsonl). Every other number drawn -- the entropy floor,
the uniform-attention levels, the first/last-block gradient ratio, the final eff_rank, the run's
context length and bits per byte -- is a key of `normlab report --json RUN` (Run.derived); where the
report has none (null, or no binary), the line or label is left out.
"""

import os
import textwrap

from plotlib.draw import (clip_top, hline_label, layer_colors, mpl, no_data_note, per_layer_lines, profile_steps,
                          readable_log, save, set_logy, step_edges)
from plotlib.read import finite, note, num, read_json


def fig_loss(run, outdir, head):
    import numpy as np
    plt = mpl()
    fig, (ax, axg) = plt.subplots(2, 1, figsize=(9, 6.4), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.3]})
    st, lo = run.series("loss")
    st, lo = np.array(st, dtype=float), np.array(lo, dtype=float)
    ok = np.isfinite(lo)
    es, ev = run.eval_series("val_loss")
    es, ev = np.array(es, dtype=float), np.array(ev, dtype=float)
    allv = np.concatenate([lo[ok], ev])
    floor = run.derived("entropy_floor")
    if ok.any():
        ax.plot(st[ok], lo[ok], color="C0", lw=1.2, label="train loss (batch)")
    if ev.size:
        bpb, best_bpb = run.derived("final_val_bpb"), run.derived("best_val_bpb")
        lab = "val loss"
        if finite(bpb):
            lab += " (last eval %.3f bits/byte%s)" % (bpb, (", best %.3f" % best_bpb) if finite(best_bpb) else "")
        ax.plot(es, ev, "o-", color="C1", ms=5, lw=1.2, label=lab)
    if allv.size:
        lo_lim = float(allv.min())
        if finite(floor):
            lo_lim = min(lo_lim, floor)
        # the y range is set by the sane part of the run: up to the first loss (random init)
        ref = [float(x) for x in lo[ok][:3]] + [float(x) for x in ev[:1]]
        hi_lim = max(ref) if ref else float(allv.max())
        hi_lim = max(hi_lim, float(np.percentile(allv, 90)))
        if lo_lim > 0 and hi_lim / lo_lim > 2.5:
            ax.set_yscale("log")
            ax.set_ylim(lo_lim / 1.06, hi_lim * 1.15)
            readable_log(ax.yaxis, lo_lim / 1.06, hi_lim * 1.15)
        else:
            pad = 0.06 * (hi_lim - lo_lim if hi_lim > lo_lim else max(1.0, abs(hi_lim)))
            ax.set_ylim(lo_lim - pad, hi_lim + 2 * pad)
        top = ax.get_ylim()[1]
        off = [float(s) for s, v in zip(st[ok], lo[ok]) if v > top]
        if off:
            clip_top(ax, off, "C0", marker="^", size=30, label="train loss above the axis")
    if finite(floor):
        ax.axhline(floor, color="k", ls="--", lw=1, label="entropy floor (best possible val loss) %.3f" % floor)
    k = run.derived("bpb_per_nat")  # report --json: nats/token -> bits/byte of the val set
    if finite(k) and k > 0:
        sec = ax.secondary_yaxis("right", functions=(lambda y, k=k: y * k, lambda y, k=k: y / k))
        sec.set_ylabel("val bits per byte (report's bpb_per_nat)")
        if ax.get_yscale() == "log":
            lo_y, hi_y = ax.get_ylim()
            readable_log(sec.yaxis, lo_y * k, hi_y * k)
    nf = run.nonfinite_steps()
    if nf:
        clip_top(ax, nf, "red", label="non-finite loss or grads (update skipped)")
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

    gs, gv = run.series("grad_norm")
    gs, gv = np.array(gs, dtype=float), np.array(gv, dtype=float)
    gok = np.isfinite(gv) & (gv > 0)
    if gok.any():
        axg.plot(gs[gok], gv[gok], color="C2", lw=1.0, label="global grad norm (before clipping)")
        axg.set_yscale("log")
        vals = list(gv[gok]) + [m[1] for m in marks["grad_norm"] if finite(m[1]) and m[1] > 0]
        readable_log(axg.yaxis, min(vals), max(vals), dense=False)
    if marks["grad_norm"]:
        axg.scatter([m[0] for m in marks["grad_norm"]], [m[1] for m in marks["grad_norm"]], marker="v", s=55,
                    facecolor="none", edgecolor="purple", linewidths=1.5, zorder=6,
                    label="grad-norm spike (also a faint line above)")
    axg.set_xlabel("update step")
    axg.set_ylabel("grad norm")
    if gok.any() or marks["grad_norm"]:
        axg.legend(loc="upper right", framealpha=0.85)
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "loss.png"))]


def fig_grad_heatmap(run, outdir, head):
    import numpy as np
    plt = mpl()
    steps, rows = run.layer_matrix("grad_norm")
    if not steps:
        return []
    from matplotlib.colors import LogNorm
    a = np.array(rows, dtype=float).T  # [L, records]
    L = a.shape[0]
    a = np.where(np.isfinite(a) & (a > 0), a, np.nan)
    fig, ax = plt.subplots(figsize=(9, max(3.6, 2.7 + 0.18 * min(L, 24))))
    fin = a[np.isfinite(a)]
    ax.grid(False)
    if fin.size:
        vmax = float(fin.max()) if fin.max() > fin.min() else float(fin.min()) * 1.01
        norm = LogNorm(vmin=float(fin.min()), vmax=vmax)
        mesh = ax.pcolormesh(step_edges(steps), np.arange(L + 1) - 0.5, np.ma.masked_invalid(a), norm=norm,
                             cmap="magma", shading="flat")
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
    return [save(fig, os.path.join(outdir, "grad_heatmap.png"))]


def fig_grad_profile(run, outdir, head):
    import numpy as np
    plt = mpl()
    steps, rows = run.layer_matrix("grad_norm")
    if not steps:
        return []
    L = len(rows[0])
    fig, ax = plt.subplots(figsize=(9, 4.8))
    idx = profile_steps(steps)
    cols = layer_colors(len(idx), "plasma")
    # grad_ratio_first_last: `normlab report`'s first/last-block ratio, of its first profile's step
    ratio, ratio_step = run.derived("grad_ratio_first_last"), run.first_profile_step()
    allp = []
    for c, i in zip(cols, idx):
        prof = np.array(rows[i], dtype=float)
        lab = "step %d" % steps[i]
        if steps[i] == ratio_step and finite(ratio):
            lab += "  (first/last block = %.2f)" % ratio
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
    return [save(fig, os.path.join(outdir, "grad_profile.png"))]


def stream_labels(n):
    return ["entering block %d" % j for j in range(n - 1)] + ["after last block"]


def fig_layers(run, outdir, head):
    plt = mpl()
    rs, rr = run.layer_matrix("act_rms")
    ms_, mr = run.layer_matrix("attn_logit_max")
    hs, hr = run.layer_matrix("attn_entropy")
    if not (rs or ms_ or hs):
        return []
    fig, axs = plt.subplots(2, 2, figsize=(9.6, 7.4))
    (a1, a2), (a3, a4) = axs
    if rs:
        n = len(rr[0])
        per_layer_lines(a1, rs, rr, stream_labels(n), "residual-stream RMS over training",
                        "RMS of the residual stream", logy=True, colorbar_label="stream position (block entered)")
        idx = profile_steps(rs)
        for c, i in zip(layer_colors(len(idx), "plasma"), idx):
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
            no_data_note(a, "no act_rms in metrics.jsonl")
    if ms_:
        per_layer_lines(a3, ms_, mr, ["block %d" % j for j in range(len(mr[0]))],
                        "attention: max pre-softmax logit", "max attention logit", logy=True)
    else:
        no_data_note(a3, "no attn_logit_max in metrics.jsonl")
    if hs:
        per_layer_lines(a4, hs, hr, ["block %d" % j for j in range(len(hr[0]))],
                        "attention entropy (mean over heads and queries)", "entropy (nats)")
        # uniform causal attention's entropy, the level every block starts from with small initial
        # weights: `normlab report`'s uniform_attn_entropy (mean_t ln(t+1) over model.ctx)
        uni, ctx = run.derived("uniform_attn_entropy"), run.derived("ctx")
        if finite(uni):
            hline_label(a4, uni, "uniform causal attention%s: %.2f" % ((" (T=%d)" % ctx) if finite(ctx) else "", uni))
            a4.set_ylim(top=max(a4.get_ylim()[1], uni * 1.12))
        hline_label(a4, 0.1, "collapse warning (0.1 nats)", color="red", ls=":", left=False)
        a4.set_ylim(bottom=0)
    else:
        no_data_note(a4, "no attn_entropy in metrics.jsonl")
    title = "%s: activations and attention per block (diagnostic steps only)" % head
    fig.suptitle(textwrap.fill(title, 95))  # long sweep run names would run off the figure
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "layers.png"))]


def fig_act_max(run, outdir, head):
    """Massive activations: max |x| of the residual stream next to its RMS."""
    import numpy as np
    plt = mpl()
    xs, xr = run.layer_matrix("act_max")
    if not xs or not np.isfinite(np.array(xr, dtype=float)).any():
        return []
    rms = dict(zip(*run.layer_matrix("act_rms")))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.4, 4.9))
    n = len(xr[0])
    per_layer_lines(a1, xs, xr, stream_labels(n), "max |x| of the residual stream over training", "max |x|",
                    logy=True, colorbar_label="stream position (block entered)")
    idx = profile_steps(xs)
    vals, has_rms = [], False
    for c, i in zip(layer_colors(len(idx), "plasma"), idx):
        mx = np.array(xr[i], dtype=float)
        a2.plot(range(n), mx, "o-", color=c, lw=1.6, ms=4, label="step %d" % xs[i])
        vals += [v for v in mx if np.isfinite(v) and v > 0]
        r = rms.get(xs[i])
        if r is not None:
            r = np.array(r[:n] + [float("nan")] * (n - len(r)), dtype=float)
            a2.plot(range(n), r, "--", color=c, lw=1.1, alpha=0.8)
            has_rms = True
            vals += [v for v in r if np.isfinite(v) and v > 0]
    if vals and max(vals) / min(vals) > 8:
        a2.set_yscale("log")
        readable_log(a2.yaxis, min(vals), max(vals))
    a2.set_xticks(range(n) if n <= 25 else range(0, n, max(1, n // 12)))
    if n <= 25:
        a2.set_xticklabels([str(j) for j in range(n - 1)] + ["out"])
    a2.set_xlabel("position j: entering block j (out = after the last block)")
    a2.set_ylabel("|x| (solid: max, dashed: RMS)")
    a2.set_title("max |x| against RMS by depth")
    handles, _ = a2.get_legend_handles_labels()
    if has_rms:
        from matplotlib.lines import Line2D
        handles += [Line2D([], [], color="0.3", lw=1.6, marker="o", ms=4, label="max |x| (solid)"),
                    Line2D([], [], color="0.3", lw=1.1, ls="--", label="RMS (dashed)")]
    a2.legend(handles=handles, loc="best", framealpha=0.85, title="update step")
    fig.suptitle(textwrap.fill("%s: massive activations (diagnostic steps only)" % head, 95))
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "act_max.png"))]


def fig_attn_sink(run, outdir, head):
    """Attention sinks: attention probability on position 0."""
    import numpy as np
    plt = mpl()
    ks, kr = run.layer_matrix("attn_sink")
    if not ks or not np.isfinite(np.array(kr, dtype=float)).any():
        return []
    fig, ax = plt.subplots(figsize=(9, 4.8))
    per_layer_lines(ax, ks, kr, ["block %d" % j for j in range(len(kr[0]))],
                    textwrap.fill("%s: attention on position 0 (attention sink), diagnostic steps" % head, 80),
                    "mean attention probability on position 0")
    # `normlab report`'s uniform_attn_sink: uniform causal attention's mean weight on position 0
    uni, ctx = run.derived("uniform_attn_sink"), run.derived("ctx")
    if finite(uni):
        hline_label(ax, uni, "uniform causal attention%s: %.3f" % ((" (T=%d)" % ctx) if finite(ctx) else "", uni))
    fin = np.array(kr, dtype=float)
    fin = fin[np.isfinite(fin)]
    hi = max(float(fin.max()), uni if finite(uni) else 0.0)
    ax.set_ylim(0, 1.0 if hi > 0.45 else max(0.05, hi * 1.25))
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "attn_sink.png"))]


def fig_block_cos(run, outdir, head):
    """block_cos: a depth x step heatmap."""
    import numpy as np
    plt = mpl()
    cs, cr = run.layer_matrix("block_cos")
    a = np.array(cr, dtype=float).T if cs else np.zeros((0, 0))
    if not cs or not np.isfinite(a).any():
        return []
    L = a.shape[0]
    fin = a[np.isfinite(a)]
    # colour scale: cos is at most 1; the lower end follows the data (rounded down to 0.05) so that
    # a run whose blocks all sit at 0.97..1.0 is not one flat colour, and never below -1
    vmin = max(-1.0, min(0.95, float(np.floor(fin.min() * 20)) / 20))
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
    ax.set_title(textwrap.fill("%s: how much each block changes the residual stream" % head, 80))
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "block_cos.png"))]


def fig_eff_rank(run, outdir, head):
    """The effective rank of the final representation per eval, with the validation loss."""
    plt = mpl()
    es, er = run.eval_series("eff_rank")
    if not es:
        return []
    fig, (ax, axr) = plt.subplots(2, 1, figsize=(9, 5.8), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    vs, vv = run.eval_series("val_loss")
    floor = run.derived("entropy_floor")
    if vs:
        ax.plot(vs, vv, "o-", color="C1", ms=5, lw=1.2, label="val loss")
        if finite(floor) and floor >= min(vv) - 0.6 * max(max(vv) - min(vv), 0.05):
            ax.axhline(floor, color="k", ls="--", lw=1, label="entropy floor %.3f" % floor)
        ax.legend(loc="best", framealpha=0.85)
    else:
        no_data_note(ax, "no finite val_loss in metrics.jsonl")
    ax.set_ylabel("val loss (nats/token)")
    ax.set_title(textwrap.fill("%s: validation loss and effective rank of the final representation" % head, 80))
    axr.plot(es, er, "s-", color="C4", ms=5, lw=1.4, label="eff_rank")
    axr.set_ylabel("effective rank\nexp(H(s / sum s))")
    axr.set_xlabel("update step")
    d = run.cfg.get("model.d_model")
    final = run.derived("final_eff_rank")
    text = ("of at most d_model = %s" % d) if d else ""
    if finite(final):
        text += ("; " if text else "") + "final %.1f" % final
    axr.text(0.99, 0.04, text, transform=axr.transAxes, ha="right", va="bottom", fontsize=8.5, color="0.25")
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "eff_rank.png"))]


def fig_tasks(run, outdir, head):
    """eval.by_task: each task's validation loss per eval (the records' own numbers), with the
    overall val loss; the toy corpus's tasks drop at different times."""
    plt = mpl()
    names = sorted({t for e in run.evals if isinstance(e.get("by_task"), dict) for t in e["by_task"]})
    if not names:
        return []
    fig, ax = plt.subplots(figsize=(9, 4.8))
    labels = {"w": "w: bigram chain", "c": "c: copy", "r": "r: reverse", "b": "b: brackets", "k": "k: recall"}
    for i, name in enumerate(names):
        pts = [(e["step"], num((e["by_task"].get(name) or {}).get("loss"))) for e in run.evals
               if isinstance(e.get("by_task"), dict)]
        pts = [(st, v) for st, v in pts if finite(v)]
        if pts:
            ax.plot([st for st, _ in pts], [v for _, v in pts], "o-", ms=3, lw=1.3, color="C%d" % i,
                    label=labels.get(name, name))
    vs, vv = run.eval_series("val_loss")
    if vs:
        ax.plot(vs, vv, "k--", lw=1.2, label="val loss (all)")
    ax.set_xlabel("update step")
    ax.set_ylabel("val loss (nats/token)")
    ax.set_title(textwrap.fill("%s: validation loss per task (eval.by_task)" % head, 80))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", framealpha=0.85, fontsize=8.5)
    else:
        no_data_note(ax, "no finite loss in the eval records' by_task")
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "tasks.png"))]


def fig_grad_noise_scale(run, outdir, head):
    plt = mpl()
    gs, gv = run.series("grad_noise_scale", [r for r in run.train if "grad_noise_scale" in r])
    ok = [(s, v) for s, v in zip(gs, gv) if finite(v)]
    if not ok:
        return []
    fig, ax = plt.subplots(figsize=(9, 4.4))
    ax.plot([s for s, _ in ok], [v for _, v in ok], "o-", color="C5", ms=4, lw=1.3, label="B_simple = tr(S) / |G|^2")
    pos = [v for _, v in ok if v > 0]
    if len(pos) == len(ok) and max(pos) / min(pos) > 20:
        set_logy(ax)
    ax.set_xlabel("update step")
    ax.set_ylabel("simple gradient noise scale")
    ax.set_title(textwrap.fill("%s: gradient noise scale (McCandlish et al. 2018), diagnostic steps" % head, 80))
    ax.legend(loc="best", framealpha=0.85)
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "grad_noise_scale.png"))]


def fig_qk_clip(run, outdir, head):
    """QK-Clip: the heads clipped per logged step, as the records give them."""
    plt = mpl()
    if not run.has_key("qk_clipped"):
        return []
    qs, qv = run.series("qk_clipped", [r for r in run.train if "qk_clipped" in r])
    qv = [v if finite(v) else 0.0 for v in qv]
    fig, ax = plt.subplots(figsize=(9, 4.4))
    width = max(1.0, 0.8 * min((b - a for a, b in zip(qs, qs[1:])), default=1))
    ax.bar(qs, qv, width=width, color="C3", label="heads clipped at that step")
    if not any(qv):
        ax.set_ylim(0, 1)
        ax.text(0.99, 0.95, "no head clipped at a logged step", transform=ax.transAxes, ha="right", va="top",
                fontsize=9, color="0.2")
    else:
        ax.set_ylim(bottom=0)
    c = run.cfg
    bits = [("optim.qk_clip = %s" % c["optim.qk_clip"]) if c.get("optim.qk_clip") else "",
            ("%s blocks x %s heads" % (c["model.n_layers"], c["model.n_heads"]))
            if c.get("model.n_layers") and c.get("model.n_heads") else ""]
    bits = "; ".join(b for b in bits if b)
    ax.set_xlabel("update step")
    ax.set_ylabel("attention heads clipped")
    ax.set_title(textwrap.fill("%s: QK-Clip%s" % (head, (" (%s)" % bits) if bits else ""), 80))
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "qk_clip.png"))]


# The per-layer series another figure draws; every other one gets layers_<name>.png.
DRAWN_LAYER_SERIES = {"grad_norm", "grad_norm_attn", "grad_norm_ffn", "grad_norm_norms", "update_ratio", "act_rms",
                      "act_max", "attn_entropy", "attn_logit_max", "attn_sink", "block_cos"}


def fig_other_layers(run, outdir, head):
    """Every other per-layer series the records hold: a statistic added to the model's LayerSeries
    gets its figure without a change here."""
    import numpy as np
    plt = mpl()
    written = []
    _, grows = run.layer_matrix("grad_norm")
    blocks = len(grows[0]) if grows else -1  # L: layers.grad_norm is in every full-diagnostics record
    for name in run.layer_names():
        if name in DRAWN_LAYER_SERIES:
            continue
        xs, rows = run.layer_matrix(name)
        if not xs or not np.isfinite(np.array(rows, dtype=float)).any():
            continue
        n = len(rows[0])
        stream = n == blocks + 1  # act_* series: L + 1 stream positions
        labs = stream_labels(n) if stream else ["block %d" % j for j in range(n)]
        pos = np.array([v for row in rows for v in row if v is not None and np.isfinite(v)], dtype=float)
        fig, ax = plt.subplots(figsize=(7.6, 4.9))
        per_layer_lines(ax, xs, rows, labs, "layers.%s over training" % name, name,
                        logy=bool(len(pos)) and pos.min() > 0 and pos.max() / pos.min() > 30,
                        colorbar_label="stream position" if stream else "block index")
        fig.suptitle(textwrap.fill("%s: layers.%s (src/metrics/README.md)" % (head, name), 70))
        fig.tight_layout()
        written.append(save(fig, os.path.join(outdir, "layers_%s.png" % name)))
    return written


def fig_depth_weights(run, outdir, head):
    """Depth attention (AttnRes): the weights of the last full-diagnostics record (reader x source).
    Records written before the key's rename call it attnres_weights."""
    import numpy as np
    plt = mpl()
    key = "depth_weights"
    rec = run.last_record_with(key)
    if rec is None:
        key = "attnres_weights"
        rec = run.last_record_with(key)
    if rec is None:
        return []
    readers = list(rec[key].keys())
    rows = [[num(v) for v in rec[key][k]] if isinstance(rec[key][k], list) else []
            for k in readers]
    cols = max(len(r) for r in rows)
    if cols == 0:
        return []
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
    fig.suptitle(textwrap.fill("%s: depth-attention weights at step %d (%s)" % (head, rec["step"], key), 70))
    fig.tight_layout()
    return [save(fig, os.path.join(outdir, "depth_weights.png"))]


def draw_autopsy(path, out):
    """One step autopsy of `normlab replay` (spikes/step_<N>.autopsy.json): the loss of every row of
    the batch at step N against N-1, per-block gradient norms and update ratios of both updates, and
    the per-head maximum attention logit and entropy at step N, as the autopsy gives them."""
    a = read_json(path)
    if not a:
        raise SystemExit("plot.py: %s: not an autopsy JSON" % path)
    plt = mpl()
    from matplotlib.ticker import MaxNLocator
    at, base = a, a.get("baseline")
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    fig.suptitle("step %d autopsy: loss %.4g (logged %.4g), %s" % (
        a["step"], num(a["loss"]), num(a["logged_loss"]),
        "reproducible bit for bit" if a["reproducible"] else "NOT reproducible"))
    ax = axes[0][0]
    rows = [num(r["loss"]) for r in at["rows"]]
    xs = list(range(len(rows)))
    if base:
        ax.bar([x - 0.2 for x in xs], [num(r["loss"]) for r in base["rows"]], width=0.4,
               color="#999999", label="step %d (baseline)" % base["step"])
    ax.bar([x + (0.2 if base else 0) for x in xs], rows, width=0.4 if base else 0.8, color="#d62728",
           label="step %d (%s)" % (a["step"], at["action"]))
    ax.axhline(num(at["loss"]), color="#d62728", lw=0.8, ls="--")
    ax.set_xlabel("row of the batch (micro-batch order)")
    ax.set_ylabel("mean cross-entropy (nats)")
    ax.set_title("loss of each row")
    ax.legend()
    for ax, key, title in ((axes[0][1], "grad_norm", "gradient norm per block"),
                           (axes[1][0], "update_ratio", "update ratio ||dW|| / ||W|| per block")):
        for cap, color in ((base, "#999999"), (at, "#d62728")):
            if cap and key in cap["layers"]:
                v = [num(x) for x in cap["layers"][key]]
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
        for i, row in enumerate(at["heads"]["attn_entropy"]):
            for h, e in enumerate(row):
                # text colour: dark on the bright half of the colour scale
                ax.text(h, i, "%.2f" % num(e), ha="center", va="center", fontsize=7,
                        color="black" if finite(vals[i][h]) and im.norm(vals[i][h]) > 0.5 else "white")
        ax.set_title("per head at step %d: max logit (colour), entropy (nats)" % a["step"])
    else:
        no_data_note(ax, "no per-head statistics")
    fig.tight_layout()
    return save(fig, out)


def fig_autopsies(run, outdir, head):
    written = []
    for path in run.autopsies():
        name = os.path.basename(path)[:-len(".autopsy.json")]
        written.append(draw_autopsy(path, os.path.join(outdir, "autopsy_%s.png" % name)))
    return written


# (file name, function, what it needs): the order is the order of drawing.
RUN_FIGURES = [
    ("loss.png", fig_loss, "train or eval records (loss, val_loss, grad_norm; spike records)"),
    ("grad_heatmap.png", fig_grad_heatmap, "layers.grad_norm"),
    ("grad_profile.png", fig_grad_profile, "layers.grad_norm"),
    ("layers.png", fig_layers, "layers.act_rms, layers.attn_logit_max or layers.attn_entropy"),
    ("act_max.png", fig_act_max, "layers.act_max"),
    ("attn_sink.png", fig_attn_sink, "layers.attn_sink"),
    ("block_cos.png", fig_block_cos, "layers.block_cos"),
    ("layers_<name>.png", fig_other_layers, "any other layers.<name> series"),
    ("eff_rank.png", fig_eff_rank, "eval records' eff_rank"),
    ("tasks.png", fig_tasks, "eval records' by_task (eval.by_task)"),
    ("grad_noise_scale.png", fig_grad_noise_scale, "train records' grad_noise_scale"),
    ("qk_clip.png", fig_qk_clip, "train records' qk_clipped"),
    ("depth_weights.png", fig_depth_weights, "train records' depth_weights (model.residual.type: attnres)"),
    ("autopsy_step_<N>.png", fig_autopsies, "spikes/step_<N>.autopsy.json (normlab replay)"),
]


def plot_run(run, outdir):
    """Every figure of RUN_FIGURES the run has the series for; the paths written."""
    if not run.train and not run.evals:
        note("%s: no train or eval records in metrics.jsonl; nothing to plot" % run.path)
        return []
    describe = run.describe()
    head = "%s%s" % (run.label, (" (" + describe + ")") if describe else "")
    written = []
    for _name, draw, _needs in RUN_FIGURES:
        written += draw(run, outdir, head)
    return written
