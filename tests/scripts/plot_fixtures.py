#!/usr/bin/python3
"""Synthetic run and sweep directories for tests/scripts/plot_test.sh: the files a run and a sweep
leave (metrics.jsonl, config.yaml, point.json, sweep.yaml) in the formats of src/train/README.md,
src/metrics/README.md and src/sweep/, with made-up but plausible records. Not a model of training:
the point is that every series plot.py draws is there (or, for the old-style ones, absent). The
derived numbers are not written here: scripts/plot.py takes them from the real binary's
`normlab report --json` of these directories (a run, and a sweep through its sweep.yaml), as it
does for a real run.

    tests/scripts/plot_fixtures.py OUTDIR

writes
    OUTDIR/run_new    a run with every diagnostic of src/metrics/README.md, including block_cos,
                      act_max, attn_sink, grad_noise_scale, qk_clipped, eval eff_rank and spike z
    OUTDIR/run_old    the same run without those (what a binary before them writes)
    OUTDIR/sweep_cat  model.layout x model.norm.type (3 x 2), 2 seeds, new fields, a sweep.yaml (so
                      `normlab report --json` gives its summary: rows, mean/std rows, short names);
                      one seed diverges (after its last eval: a finite best val loss)
    OUTDIR/sweep_old  model.norm.type only (3 values), 2 seeds, old-style records, no sweep.yaml and
                      no summary.csv (an older sweep directory: no summary at all)
Standard library only.
"""

import json
import math
import os
import random
import sys

L, HEADS, CTX, D = 3, 2, 32, 32
STEPS, LOG_EVERY, DIAG_EVERY, EVAL_EVERY, WINDOW = 200, 2, 4, 50, 16


def config_yaml(out_dir, layout, norm, seed, new):
    qk = "  qk_clip: 100\n" if new else ""
    return ("seed: %d\nout_dir: \"%s\"\ndata:\n  train: \"data/toy/train.txt\"\n  val: \"data/toy/val.txt\"\n"
            "model:\n  vocab_size: 256\n  ctx: %d\n  d_model: %d\n  n_layers: %d\n  n_heads: %d\n  d_ff: 64\n"
            "  layout: \"%s\"\n  norm:\n    type: \"%s\"\n    eps: auto\n  qk_norm: false\n"
            "optim:\n  lr: 0.002\n  warmup: 5\n%s"
            "train:\n  steps: %d\n  batch_size: 4\n  accum: 2\n  log_every: %d\n"
            "eval:\n  every: %d\n  max_windows: 4\n"
            "diag:\n  every: %d\n  spike:\n    window: %d\n    zscore: 6\n    action: \"log\"\n"
            % (seed, out_dir, CTX, D, L, HEADS, layout, norm, qk, STEPS, LOG_EVERY, EVAL_EVERY, DIAG_EVERY,
               WINDOW))


def metrics_lines(layout, norm, seed, new, diverge_at=None):
    rng = random.Random("%s/%s/%d" % (layout, norm, seed))
    base = {"pre": 2.0, "post": 2.12, "sandwich": 1.96}.get(layout, 2.05) - (0.03 if norm == "rmsnorm" else 0)
    # Xiong et al.'s Figure 3 shape: Post-LN's block gradients grow towards the top, Pre-LN's are flat
    # and shrink a little with depth
    tilt = {"post": 1.8, "pre": 0.85, "sandwich": 0.95}.get(layout, 1.0)
    lines, hist = [], []
    for s in range(0, STEPS, LOG_EVERY):
        lr = 0.002 * min(1.0, (s + 1) / 5)
        loss = base + 3.5 * math.exp(-s / 30) + rng.gauss(0, 0.02)
        gnorm = 0.5 + 0.8 * math.exp(-s / 40) + abs(rng.gauss(0, 0.05))
        if s == 120 and layout == "post":
            loss, gnorm = loss + 0.8, gnorm * 6  # a spike
        if diverge_at is not None and s >= diverge_at:
            r = {"kind": "train", "step": s, "loss": None, "grad_norm": None, "lr": lr, "skipped": True,
                 "nonfinite": True}
            lines.append(json.dumps(r))
            break
        r = {"kind": "train", "step": s, "loss": loss, "lr": lr, "grad_norm": gnorm, "tokens": 128 * (s + 1),
             "tok_per_s": 50000.0 + rng.gauss(0, 1000), "param_norm": 13.0 + s / 100}
        if len(hist) >= WINDOW // LOG_EVERY:  # the detector is active once its window is full
            for k, v in (("loss", loss), ("grad_norm", gnorm)):
                w = [h[k] for h in hist[-(WINDOW // LOG_EVERY):]]
                m = sum(w) / len(w)
                sd = math.sqrt(sum((x - m) ** 2 for x in w) / len(w))
                r[k + "_z"] = (v - m) / sd if sd > 1e-12 else 0.0
        hist.append({"loss": loss, "grad_norm": gnorm})
        if s % DIAG_EVERY == 0:
            g = [gnorm / math.sqrt(L) * tilt ** ((i - (L - 1) / 2) / (L - 1)) * (1 + 0.02 * rng.random())
                 for i in range(L)]
            act_rms = [0.03 * (1 + 0.4 * j) * (1 + s / 100) for j in range(L + 1)]
            layers = {"grad_norm": g, "grad_norm_attn": [x * 0.7 for x in g], "grad_norm_ffn": [x * 0.7 for x in g],
                      "grad_norm_norms": [x * 0.02 for x in g], "update_ratio": [lr * 2] * L, "act_rms": act_rms,
                      "attn_entropy": [2.5 - 0.8 * (1 - math.exp(-s / 50)) * (i + 1) / L for i in range(L)],
                      "attn_logit_max": [0.05 + 3 * (1 - math.exp(-s / 60)) * (i + 1) for i in range(L)]}
            if new:
                grow = 1 - math.exp(-s / 60)
                layers["block_cos"] = [min(1.0, 0.55 + 0.4 * grow * (i + 1) / L + 0.01 * rng.random())
                                       for i in range(L)]
                layers["act_max"] = [x * (4 + 60 * grow * (j >= 1)) for j, x in enumerate(act_rms)]
                layers["attn_sink"] = [0.12 + 0.6 * grow * i / (L - 1) for i in range(L)]
                r["grad_noise_scale"] = 40 * (1 + s / 50) * (1 + 0.1 * rng.random()) if s > 0 else None
            r["layers"] = layers
            if new:
                r["qk_clipped"] = int(max(0, round(HEADS * L * math.exp(-s / 25) - 0.5 + rng.random())))
        lines.append(json.dumps(r))
        if s % EVAL_EVERY == 0 or s == STEPS - LOG_EVERY:
            e = {"kind": "eval", "step": s, "val_loss": loss + 0.03, "val_excess": loss + 0.03 - 1.0}
            if new:
                e["eff_rank"] = 4 + 18 * (1 - math.exp(-s / 70)) - (3 if layout == "post" else 0)
                e["by_task"] = {t: {"tokens": 100, "loss": loss + 0.03 + off * math.exp(-s / 60)}
                                for t, off in (("c", 1.0), ("r", 1.4), ("w", -0.3), ("other", 0.2))}
            lines.append(json.dumps(e))
        if s == 120 and layout == "post" and "loss_z" in r:
            lines.append(json.dumps({"kind": "spike", "step": s, "metric": "loss", "value": loss, "mean": base,
                                     "std": 0.05, "z": r["loss_z"], "action": "log"}))
    return lines


def write_run(d, layout, norm, seed, new, diverge_at=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write(config_yaml(d, layout, norm, seed, new))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write("\n".join(metrics_lines(layout, norm, seed, new, diverge_at)) + "\n")


def sweep_yaml(d, axes, seeds):
    """The resolved sweep file `normlab sweep` writes into the sweep directory."""
    base = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "configs", "default.yaml")
    lines = ["# The resolved sweep (quick and --set applied), written by normlab sweep.", "base: %s" % base,
             "out_dir: %s" % d, "set:", "  model.n_layers: %d" % L, "axes:"]
    lines += ["  %s: [%s]" % (k, ", ".join(v)) for k, v in axes.items()]
    lines += ["zip:", "  []", "seeds: [%s]" % ", ".join(str(s) for s in seeds)]
    return "\n".join(lines) + "\n"


def write_sweep(d, axes, seeds, new, with_sweep_yaml, diverge=None):
    """axes: {key: [values]} in sweep order; one run directory per combination and seed, and (with
    with_sweep_yaml) the sweep.yaml from which `normlab report --json` summarises them."""
    keys = list(axes)
    combos = [[]]
    for k in keys:
        combos = [c + [v] for c in combos for v in axes[k]]
    for c in combos:
        for seed in seeds:
            over = dict(zip(keys, c))
            name = ",".join("%s=%s" % (k.split(".", 1)[1], v) for k, v in over.items()) + ",seed=%d" % seed
            run = os.path.join(d, "runs", name)
            layout = over.get("model.layout", "pre")
            norm = over.get("model.norm.type", "layernorm")
            div = 150 if diverge == (layout, norm, seed) else None
            write_run(run, layout, norm, seed, new, div)
            with open(os.path.join(run, "point.json"), "w") as f:
                json.dump({"name": name, "overrides": over, "seed": seed,
                           "status": "diverged" if div is not None else "done", "exit_code": 0, "wall_s": 3.5}, f)
                f.write("\n")
    if with_sweep_yaml:
        with open(os.path.join(d, "sweep.yaml"), "w") as f:
            f.write(sweep_yaml(d, axes, seeds))


def main(out):
    write_run(os.path.join(out, "run_new"), "pre", "layernorm", 1, True)
    write_run(os.path.join(out, "run_old"), "pre", "layernorm", 1, False)
    write_sweep(os.path.join(out, "sweep_cat"),
                {"model.layout": ["pre", "post", "sandwich"], "model.norm.type": ["layernorm", "rmsnorm"]},
                [1, 2], True, True, diverge=("post", "layernorm", 2))
    write_sweep(os.path.join(out, "sweep_old"), {"model.norm.type": ["layernorm", "rmsnorm", "scalenorm"]},
                [1, 2], False, False)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tests/scripts/plot_fixtures.py OUTDIR")
    main(sys.argv[1])
