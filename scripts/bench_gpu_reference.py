#!/usr/bin/env python3
"""The "nanoGPT GPU recipe" reference for `normlab bench` on CUDA: what a PyTorch user would run
instead of NormLab on a GPU. The model, init, data offsets and lr schedule are bench_reference.py's
(imported from it, not copied: the same numbers as NormLab, src/model/README.md, data/README.md and src/train/README.md); on top of
them the usual GPU speed settings:

  * bf16 autocast (`torch.autocast(device, dtype=torch.bfloat16)`) around forward + loss
    (--precision bf16, the default; --precision fp32 runs without autocast)
  * attention as F.scaled_dot_product_attention(is_causal=True) and torch.compile(model)
    (--variant compile, the default; `sdpa` drops the compile, `eager` the SDPA too)
  * fused AdamW (torch.optim.AdamW(..., fused=True); decay on >=2-D params, none on the rest;
    --no-fused for the default implementation)
  * TF32 matmuls and convolutions (torch.backends.cuda.matmul.allow_tf32 = True,
    torch.backends.cudnn.allow_tf32 = True; --no-tf32 to leave them off)
  * global-norm clip (optim.grad_clip, 1.0 in the bench configs), zero_grad(set_to_none=True)

    scripts/bench_gpu_reference.py -c CONFIG [--device cuda|cpu] [--precision bf16|fp32]
        [--variant compile|sdpa|eager] [--steps N] [--warmup W] [--no-fused] [--no-tf32]
        [--json] [--set key.path=value ...] [--verbose]

A training step = draw the batch (index the corpus, which lives on the device), set the lr, forward
+ cross-entropy (under autocast for bf16), backward, clip, AdamW step, zero_grad, loss.item(), and
on CUDA torch.cuda.synchronize() before the clock is read; the median of --steps timed steps
(default 30) after --warmup untimed ones (default 10: they take torch.compile's compile time) is
reported. FLOPs/token = 6 x non-embedding params + 12 x L x d x ctx (as bench_reference.py and
normlab bench). GEMM peaks: 8192^3 torch.mm on the device (1024^3 on the CPU), best of 10, fp32 with
TF32 off (best of a measurement before and one after the timed steps) and bf16; `mfu` = achieved /
the bf16 peak for --precision bf16, else / the fp32 peak (`mfu_of` says which; an fp32 run with
TF32 on can exceed 100% of the fp32 peak; on the CPU the bf16 peak is not measured, 0, and the MFU is
of the fp32 peak). peak_device_mib = torch.cuda.max_memory_allocated() over
the timed steps (the stats are reset after the warm-up). The JSON line (--json) has the keys of
`normlab bench --json` plus variant, precision, tf32, fused_adamw, mfu_of, warmup_s (the wall
time of the warm-up steps, torch.compile's compilation included).

On a GPU machine: `python3 scripts/bench_gpu_reference.py -c configs/bench/gpt2s.yaml --json`
(python3 with PyTorch 2.x, numpy and PyYAML; nothing is installed: when the running interpreter
lacks them it re-execs once under /usr/bin/python3, else exits with a message).
scripts/bench_gpu.sh runs it interleaved with normlab. On a CPU (testing): `--device cpu`.
"""

import argparse
import importlib.util
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
SCRIPT = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(SCRIPT))
import bench_reference as ref  # noqa: E402  (model, init, data, lr schedule, config)


def _log(msg):
    print("bench_gpu_reference: " + msg, file=sys.stderr, flush=True)


def ensure_environment():
    """torch, yaml and numpy importable: else re-exec once under /usr/bin/python3, else exit 1.
    Never installs anything (the GPU machine has no package manager)."""
    missing = [m for m in ("torch", "yaml", "numpy") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    same = os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON)
    if not same and os.path.exists(SYSTEM_PYTHON) and not os.environ.get("NORMLAB_BENCH_SYSPY"):
        os.environ["NORMLAB_BENCH_SYSPY"] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, SCRIPT] + sys.argv[1:])
    _log("needs PyTorch 2.x, PyYAML and numpy; %s lacks %s" % (sys.executable, ", ".join(missing)))
    sys.exit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench_gpu_reference.py",
                                 description="nanoGPT-style GPU recipe reference for normlab bench.")
    ap.add_argument("-c", "--config", required=True, help="NormLab YAML config")
    ap.add_argument("--device", default=None,
                    help="cuda (default; or the config's train.device when it is not cpu), cuda:N, cpu")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16 (default): forward and loss under bf16 autocast; fp32: none")
    ap.add_argument("--variant", choices=("compile", "sdpa", "eager"), default="compile",
                    help="compile (default): SDPA attention + torch.compile(model); sdpa: no compile; "
                         "eager: explicit matmul/softmax attention, no compile")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    ap.add_argument("--warmup", type=int, default=10,
                    help="untimed warm-up steps, torch.compile's compile time included (default 10)")
    ap.add_argument("--no-fused", dest="fused", action="store_false",
                    help="AdamW without fused=True (PyTorch's default implementation)")
    ap.add_argument("--no-tf32", dest="tf32", action="store_false", help="leave TF32 matmuls off")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key, value parsed as YAML (repeatable)")
    ap.add_argument("--verbose", "-v", action="store_true", help="per-step loss and time on stderr")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    for s in args.set:
        if "=" not in s or not s.split("=", 1)[0].strip():
            ap.error("--set expects key.path=value, got %r" % s)
    if not os.path.isfile(args.config):
        ap.error("config file %r not found" % args.config)
    return args


def sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_peak(device, dtype, n, repeats=10, warmup=3):
    """Best-of-`repeats` n x n x n torch.mm (into a preallocated output) in GFLOP/s, each timed
    between two synchronizes, as normlab bench's gemm_peak_gflops."""
    import torch
    from time import perf_counter
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=g, device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    best = float("inf")
    for i in range(warmup + repeats):
        sync(device)
        t0 = perf_counter()
        torch.mm(a, b, out=out)
        sync(device)
        if i >= warmup:
            best = min(best, perf_counter() - t0)
    del a, b, out
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2.0 * n ** 3 / best / 1e9


def fp32_gemm_peak(device, n):
    """The fp32 peak with TF32 off (the true fp32 rate), the caller's TF32 setting restored."""
    import torch
    if device.type != "cuda":
        return gemm_peak(device, torch.float32, n)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return gemm_peak(device, torch.float32, n)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


class Recipe:
    """The training step of the recipe, on bench_reference.py's model and data."""

    def __init__(self, c, device, precision, variant, fused, verbose):
        import torch
        self.c, self.device, self.verbose = c, device, verbose
        self.batches = ref.Batches(c.train_path, c.ctx, c.B, c.seed, c.shuffle, c.V)
        # the corpus and the column index on the device: a batch is one gather there
        self.batches.data = self.batches.data.to(device)
        self.batches.cols = self.batches.cols.to(device)
        c.sdpa = variant in ("sdpa", "compile")
        torch.manual_seed(c.seed)
        self.model = ref.build_model(c).to(device)    # initialised on the CPU stream, as NormLab
        self.forward = torch.compile(self.model) if variant == "compile" else self.model
        self.params = list(self.model.parameters())
        decay = [p for p in self.params if p.dim() >= 2]
        no_decay = [p for p in self.params if p.dim() < 2]
        kw = {"fused": True} if fused else {}
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": c.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=c.lr, betas=c.betas, eps=c.eps, **kw)
        self.autocast = precision == "bf16"
        self.s = 0
        self.losses = []

    def batch(self):
        import torch
        b = self.batches
        off = torch.tensor(b.offsets(b.k), dtype=torch.int64).unsqueeze(1).to(self.device, non_blocking=True)
        b.k += 1
        w = b.data[off + b.cols].long()                 # (B, ctx + 1) int64, on the device
        return w[:, :-1], w[:, 1:]

    def step(self):
        import contextlib
        import torch
        import torch.nn.functional as F
        from time import perf_counter
        c = self.c
        t0 = perf_counter()
        x, y = self.batch()
        lr = ref.lr_at(c, self.s, c.steps)
        for g in self.opt.param_groups:
            g["lr"] = lr
        ctx = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.autocast
               else contextlib.nullcontext())
        with ctx:
            logits = self.forward(x)
            loss = F.cross_entropy(logits.view(-1, c.V), y.reshape(-1))
        loss.backward()
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, c.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        lv = loss.item()
        sync(self.device)
        dt = perf_counter() - t0
        self.losses.append(lv)
        if self.verbose:
            _log("step %4d  loss %.4f  lr %.3e  %.4f s" % (self.s, lv, lr, dt))
        self.s += 1
        return dt


def run_bench(args):
    import json
    import torch

    raw = ref.apply_sets(ref.load_config(args.config), args.set)
    train = raw.get("train") or {}
    cfg_device = str(train.pop("device", "cpu") or "cpu")   # bench_reference's Cfg takes the CPU only
    train.pop("precision", None)                              # --precision decides here
    c = ref.Cfg(raw)
    dev = args.device or (cfg_device if cfg_device not in ("cpu", "auto") else "cuda")
    device = torch.device(dev)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)   # set_device and the memory statistics need an index
    if int(torch.__version__.split(".")[0]) < 2:
        raise ref.UsageError("needs PyTorch 2.x; this is %s (%s)" % (torch.__version__, sys.executable))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ref.UsageError("--device %s: CUDA is not available to this PyTorch (%s)" % (dev, torch.__version__))
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32

    n = 8192 if device.type == "cuda" else 1024
    peak_before = fp32_gemm_peak(device, n)
    tr = Recipe(c, device, args.precision, args.variant, args.fused, args.verbose)
    n_params = sum(p.numel() for p in tr.params)
    n_nonemb = n_params - tr.model.tok_emb.weight.numel() - tr.model.pos_emb.weight.numel()
    flops_tok = 6 * n_nonemb + 12 * c.L * c.d * c.ctx

    from time import perf_counter
    t0 = perf_counter()
    for _ in range(args.warmup):
        tr.step()
    warmup_s = perf_counter() - t0          # torch.compile's compile time is in here
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = [tr.step() for _ in range(args.steps)]
    peak_mib = torch.cuda.max_memory_allocated(device) / 2.0 ** 20 if device.type == "cuda" else 0.0

    med = ref.median(times)
    tokens_s = c.B * c.ctx / med
    gflops = flops_tok * tokens_s / 1e9
    peak32 = max(peak_before, fp32_gemm_peak(device, n))
    # bf16 peak: on CUDA only (as normlab bench; on the CPU a bf16 GEMM is ~100x slower, 0 = not
    # measured, and the MFU of a bf16 CPU run is then of the fp32 peak)
    peak16 = gemm_peak(device, torch.bfloat16, n) if device.type == "cuda" else 0.0
    mfu_of = "bf16" if args.precision == "bf16" and peak16 > 0 else "fp32"
    res = {
        "impl": "pytorch-recipe",
        "variant": args.variant,
        "precision": args.precision,
        "config": args.config,
        "device": str(device),
        "steps": args.steps,
        "warmup": args.warmup,
        "warmup_s": warmup_s,
        "median_step_s": med,
        "min_step_s": min(times),
        "max_step_s": max(times),
        "tokens_per_s": tokens_s,
        "flops_per_token": flops_tok,
        "flops_formula": "6*non_embedding_params + 12*L*d*ctx",
        "gflops": gflops,
        "gemm_peak_gflops": peak32,
        "gemm_peak_bf16_gflops": peak16,
        "mfu": gflops / (peak16 if mfu_of == "bf16" else peak32),
        "mfu_of": mfu_of,
        "peak_device_mib": peak_mib,
        "params": n_params,
        "non_embedding_params": n_nonemb,
        "first_loss": tr.losses[0],
        "last_loss": tr.losses[-1],
        "tf32": bool(args.tf32) and device.type == "cuda",
        "fused_adamw": bool(args.fused),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "batch_size": c.B, "ctx": c.ctx, "tokens_per_step": c.B * c.ctx,
        "gemm": "%dx%dx%d torch.mm, best of 10; fp32 with TF32 off (best of before and after the "
                "timed steps), bf16 after" % (n, n, n),
    }
    if args.json:
        print(json.dumps(res), flush=True)
        return 0
    row = lambda k, v: print("%-16s %s" % (k, v))
    print("NormLab GPU recipe reference: PyTorch %s, %s %s, %s" % (torch.__version__, args.variant,
                                                                  args.precision, c.describe()))
    row("config", args.config)
    row("device", "%s%s" % (device, " (%s)" % res["gpu"] if res["gpu"] else ""))
    row("params", "{:,} ({:,} non-embedding)".format(n_params, n_nonemb))
    row("settings", "tf32 %s, fused AdamW %s" % (res["tf32"], res["fused_adamw"]))
    row("steps", "%d timed after %d warm-up (%.1f s, compile included)" % (args.steps, args.warmup, warmup_s))
    row("median step", "%.5f s  (min %.5f, max %.5f)" % (med, min(times), max(times)))
    row("tokens/s", "{:,.0f}".format(tokens_s))
    row("FLOPs/token", "{:,}".format(flops_tok))
    row("achieved", "%.1f GFLOP/s" % gflops)
    row("GEMM peak", "fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (%d^3)" % (peak32, peak16, n))
    row("MFU", "%.1f%% (of the %s peak)" % (100.0 * res["mfu"], mfu_of))
    if device.type == "cuda":
        row("peak GPU memory", "%.0f MiB (max_memory_allocated over the timed steps)" % peak_mib)
    row("loss", "%.4f (step 0) -> %.4f (step %d)" % (tr.losses[0], tr.losses[-1], len(tr.losses) - 1))
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ensure_environment()
    try:
        return run_bench(args)
    except ref.UsageError as e:
        _log("error: %s" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
