#!/usr/bin/python3
"""PyTorch (Python) reference for `normlab bench`: the same model, init, data and optimizer as
NormLab (docs: src/model/README.md, data/README.md and src/train/README.md), written idiomatically for PyTorch 1.13 on the CPU,
timed the same way. It is the baseline of the performance issue: NormLab must beat it.

    scripts/bench_reference.py -c CONFIG [--steps N] [--warmup W] [--threads T|best] [--json]
                               [--set key.path=value ...] [--trial-steps K] [--verbose]

    -c CONFIG        NormLab YAML config (`base:` chains are merged as NormLab does)
    --steps N        timed training steps (default 20); the median step time is reported
    --warmup W       untimed steps before them (default 5)
    --threads T      torch.set_num_threads(T); `best` (default) runs a short trial (1 warm-up step +
                     --trial-steps timed steps) at 1 and 2 threads and measures at the faster one
    --json           one JSON line on stdout instead of the table
    --set k.p=v      override a config key (value parsed as YAML), as `normlab --set`
    --verbose        per-step loss and phase times on stderr

A training step = draw the batch, set the lr, forward + cross-entropy, backward, global-norm clip,
AdamW step (with optim.type muon: torch.optim.Muon for the hidden matrices, AdamW for the rest),
zero_grad(set_to_none=True); each step is timed with time.perf_counter (on the CPU every
op is synchronous). FLOPs/token = 6 x non-embedding params + 12 x L x d x ctx (non-embedding params:
all parameters but tok_emb and pos_emb; the tied head counts with tok_emb). The GEMM peak is the best
of 10 1024^3 fp32 torch.mm before and 10 after the timed steps, in this process, at the chosen thread setting; MFU = achieved / peak.
Peak RSS is getrusage(RUSAGE_SELF).ru_maxrss.

Environment: Debian's python3-torch (1.13, OpenMP ATen + OpenBLAS pthreads). The script re-execs
itself under /usr/bin/python3 if the running interpreter has no torch; when torch, yaml or numpy
are still missing it installs nothing: it prints the command that does (scripts/setup.sh
--bench-ref) and exits 1. It re-execs itself once with
OMP_WAIT_POLICY=passive when that variable is unset: OpenBLAS runs GEMMs on its own pthread pool
whatever torch.set_num_threads says, and with 2 ATen (OpenMP) threads the spinning OpenMP workers
would fight it for the 2 cores. An OMP_WAIT_POLICY set by the caller is respected. When the loaded
OpenBLAS is the OpenMP build (LD_LIBRARY_PATH=/usr/lib/<multiarch>/openblas-openmp, what
`scripts/bench.sh --ref-openmp-blas` does) there is one pool and the wait policy is left alone.

Mirrored from NormLab so that both train the same numbers (step 0 loss agrees to float precision):
the init stream (torch.manual_seed(seed), modules built in NormLab's registration order, then
re-initialised in named_parameters() order), the data offsets (NormLab's splitmix64 stream of
data/README.md), the lr schedule (src/train/README.md, Optimisation), clipping coefficient
min(1, clip/(norm+1e-6)).
"""

import argparse
import importlib.util
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
SCRIPT = os.path.abspath(__file__)
REPO_ROOT = os.path.dirname(os.path.dirname(SCRIPT))


def _log(msg):
    print("bench_reference: " + msg, file=sys.stderr, flush=True)


def _have_modules():
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "yaml", "numpy"))


def _reexec(python, env_updates):
    """Replaces this process with `python SCRIPT args`, before torch is imported (so that the
    peak RSS of the new image is not inflated by this one)."""
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
    """Right interpreter, packages present, OMP_WAIT_POLICY set: re-execs at most a few times."""
    if not _have_modules():
        same = os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON)
        if not same and os.path.exists(SYSTEM_PYTHON) and not os.environ.get("NORMLAB_BENCH_SYSPY"):
            _reexec(SYSTEM_PYTHON, {"NORMLAB_BENCH_SYSPY": "1"})
        missing = [m for m in ("torch", "yaml", "numpy") if importlib.util.find_spec(m) is None]
        _log("needs %s, which %s cannot import; install with: %s"
             % (", ".join(missing), sys.executable, install_hint("--bench-ref")))
        sys.exit(1)
    if "OMP_WAIT_POLICY" not in os.environ and openblas_threading() != "openmp":
        _reexec(sys.executable, {"OMP_WAIT_POLICY": "passive"})


def openblas_threading():
    """'openmp', 'pthreads' or 'sequential' for the libopenblas.so.0 this process loads (torch loads
    the same one), '' when there is none."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        return {0: "sequential", 1: "pthreads", 2: "openmp"}.get(lib.openblas_get_parallel(), "")
    except (OSError, AttributeError):
        return ""


# ----------------------------------------------------------------------------------------------
# command line (parsed before any re-exec, so usage errors are immediate)
# ----------------------------------------------------------------------------------------------

class UsageError(Exception):
    pass


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench_reference.py",
        description="PyTorch (Python) reference training benchmark for NormLab configs.")
    ap.add_argument("-c", "--config", required=True, help="NormLab YAML config")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    ap.add_argument("--threads", default="best", help="ATen threads, or `best` (default): try 1 and 2")
    ap.add_argument("--trial-steps", type=int, default=5,
                    help="timed steps of each --threads best trial (default 5)")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key, value parsed as YAML (repeatable)")
    ap.add_argument("--verbose", "-v", action="store_true", help="per-step loss and times on stderr")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="fp32 (default); bf16: the forward and the loss under torch.autocast('cpu', "
                         "dtype=torch.bfloat16), fp32 weights, and torch.optim.AdamW(fused=True) "
                         "(PyTorch >= 2.4), as a speed-minded PyTorch 2.x user trains on the CPU")
    ap.add_argument("--variant", choices=("eager", "sdpa", "compile"), default="eager",
                    help="eager (default): attention as explicit matmul/softmax ops; sdpa: "
                         "F.scaled_dot_product_attention(is_causal=True) (PyTorch 2.x); compile: sdpa "
                         "and torch.compile(model) (PyTorch 2.x; compile time is in the warm-up)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.trial_steps < 1:
        ap.error("--trial-steps must be >= 1")
    if args.threads != "best":
        try:
            n = int(args.threads)
        except ValueError:
            ap.error("--threads: expected a positive integer or `best`, got %r" % args.threads)
        if n < 1:
            ap.error("--threads must be >= 1")
        args.threads = n
    for s in args.set:
        if "=" not in s or not s.split("=", 1)[0].strip():
            ap.error("--set expects key.path=value, got %r" % s)
    if not os.path.isfile(args.config):
        ap.error("config file %r not found" % args.config)
    return args


# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------

def deep_merge(base, over):
    """over's keys replace base's; mappings merge key by key (NormLab's merge_nodes)."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return over
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if k in out else v
    return out


def load_config(path, depth=0):
    import yaml
    if depth > 8:
        raise UsageError("%s: base: chain of more than 8 files (a cycle?)" % path)
    with open(path) as f:
        root = yaml.safe_load(f) or {}
    if not isinstance(root, dict):
        raise UsageError("%s: expected a mapping at the top level" % path)
    if "base" in root:
        b = root.pop("base")
        if not isinstance(b, str):
            raise UsageError("%s: base: expected a path to another config file" % path)
        bpath = os.path.join(os.path.dirname(path) or ".", b)
        if not os.path.isfile(bpath):
            raise UsageError("%s: base: file '%s' not found" % (path, bpath))
        root = deep_merge(load_config(bpath, depth + 1), root)
    return root


def apply_sets(cfg, sets):
    import yaml
    for s in sets:
        key, val = s.split("=", 1)
        parts = key.strip().split(".")
        node = cfg
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[parts[-1]] = yaml.safe_load(val)
    return cfg


def _is_auto(v):
    return v is None or (isinstance(v, str) and v.strip().lower() == "auto")


def _num(v, what):
    if isinstance(v, bool):
        raise UsageError("%s: expected a number, got %r" % (what, v))
    try:
        return float(v)   # PyYAML (YAML 1.1) reads "1e-5" as a string
    except (TypeError, ValueError):
        raise UsageError("%s: expected a number, got %r" % (what, v))


def _int(v, what):
    x = _num(v, what)
    if x != int(x):
        raise UsageError("%s: expected an integer, got %r" % (what, v))
    return int(x)


def _bool(v, what):
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise UsageError("%s: expected true or false, got %r" % (what, v))


DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}
SUPPORTED_LAYOUTS = ("pre", "post", "sandwich", "reordered", "mix")


class Cfg:
    """The keys this benchmark uses, with the contract's defaults. Model features it does not
    implement are rejected (exit 2) rather than silently benchmarked as something else."""

    def __init__(self, raw):
        g = lambda sec: raw.get(sec) or {}
        m, o, t, i, d = g("model"), g("optim"), g("train"), g("init"), g("data")
        self.seed = _int(raw.get("seed", 1337), "seed")
        self.V = _int(m.get("vocab_size", 256), "model.vocab_size")
        self.ctx = _int(m.get("ctx", 128), "model.ctx")
        self.d = _int(m.get("d_model", 128), "model.d_model")
        self.L = _int(m.get("n_layers", 4), "model.n_layers")
        self.H = _int(m.get("n_heads", 4), "model.n_heads")
        self.d_ff = _int(m.get("d_ff", 512), "model.d_ff")
        if self.d % self.H:
            raise UsageError("model.d_model %d is not divisible by model.n_heads %d" % (self.d, self.H))
        self.layout = str(m.get("layout", "pre"))
        if self.layout not in SUPPORTED_LAYOUTS:
            raise UsageError("model.layout %r: this reference implements %s" % (self.layout, ", ".join(SUPPORTED_LAYOUTS)))
        mix = m.get("mix") or {}
        pl = mix.get("post_layers", "auto")
        self.mix_post = self.L // 4 if _is_auto(pl) else _int(pl, "model.mix.post_layers")
        norm = m.get("norm") or {}
        self.norm_type = str(norm.get("type", "layernorm"))
        if self.norm_type not in DEFAULT_EPS:
            raise UsageError("model.norm.type %r: this reference implements %s" % (self.norm_type, ", ".join(DEFAULT_EPS)))
        eps = norm.get("eps", "auto")
        self.norm_eps = DEFAULT_EPS[self.norm_type] if _is_auto(eps) else _num(eps, "model.norm.eps")
        self.norm_bias = _bool(norm.get("bias", True), "model.norm.bias")
        self.pos = str(m.get("pos", "learned"))
        self.ffn = str(m.get("ffn", "gelu"))
        if self.ffn not in ("gelu", "swiglu"):
            raise UsageError("model.ffn %r: expected gelu or swiglu" % self.ffn)
        self.bias = _bool(m.get("bias", False), "model.bias")
        self.tie = _bool(m.get("tie_embeddings", True), "model.tie_embeddings")
        unsupported = {"pos": (self.pos, "learned"),
                       "qk_norm": (_bool(m.get("qk_norm", False), "model.qk_norm"), False),
                       "attn_softcap": (_num(m.get("attn_softcap", 0) or 0, "model.attn_softcap"), 0),
                       "logit_softcap": (_num(m.get("logit_softcap", 0) or 0, "model.logit_softcap"), 0),
                       "embed_norm": (_bool(m.get("embed_norm", False), "model.embed_norm"), False)}
        for k, (v, ok) in unsupported.items():
            if v != ok:
                raise UsageError("model.%s: %r is not implemented by this reference (only %r)" % (k, v, ok))
        self.init_scheme = str(i.get("scheme", "normal"))
        if self.init_scheme not in ("normal", "xavier"):
            raise UsageError("init.scheme %r: expected normal or xavier" % self.init_scheme)
        self.init_std = _num(i.get("std", 0.02), "init.std")
        self.embed_std = _num(i.get("embed_std", 0.02), "init.embed_std")
        self.scaled_residual = _bool(i.get("scaled_residual", True), "init.scaled_residual")
        if _bool(i.get("zero_query", False), "init.zero_query"):
            raise UsageError("init.zero_query: true is not implemented by this reference (only false)")
        self.lr = _num(o.get("lr", 1e-3), "optim.lr")
        self.min_lr = _num(o.get("min_lr", 1e-4), "optim.min_lr")
        betas = o.get("betas", [0.9, 0.95])
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise UsageError("optim.betas: expected [beta1, beta2], got %r" % (betas,))
        self.betas = (_num(betas[0], "optim.betas[0]"), _num(betas[1], "optim.betas[1]"))
        self.eps = _num(o.get("eps", 1e-8), "optim.eps")
        self.weight_decay = _num(o.get("weight_decay", 0.1), "optim.weight_decay")
        self.warmup = _int(o.get("warmup", 100), "optim.warmup")
        self.schedule = str(o.get("schedule", "cosine"))
        if self.schedule not in ("cosine", "linear", "constant"):
            raise UsageError("optim.schedule %r: expected cosine, linear or constant" % self.schedule)
        self.grad_clip = _num(o.get("grad_clip", 1.0), "optim.grad_clip")
        # optim.type muon: torch.optim.Muon (PyTorch >= 2.9) for the hidden matrices (every 2-D
        # parameter but the embeddings, so the tied head too stays AdamW's), AdamW for the rest, as
        # NormLab's roles split them (src/train/README.md, Optimizers). Only what torch.optim.Muon
        # computes: Keller's Newton-Schulz in bf16, no cautious weight decay.
        self.optim_type = str(o.get("type", "adamw"))
        if self.optim_type not in ("adamw", "muon"):
            raise UsageError("optim.type %r: this reference implements adamw and muon (torch.optim.Muon)" % self.optim_type)
        mu = o.get("muon") or {}
        self.muon_lr = _num(mu.get("lr", 0.02), "optim.muon.lr")
        self.muon_momentum = _num(mu.get("momentum", 0.95), "optim.muon.momentum")
        self.muon_nesterov = _bool(mu.get("nesterov", True), "optim.muon.nesterov")
        self.muon_ns_steps = _int(mu.get("ns_steps", 5), "optim.muon.ns_steps")
        self.muon_adjust_lr = str(mu.get("adjust_lr", "original"))
        for key, value, ok in (("ns", str(mu.get("ns", "keller")), "keller"),
                               ("ns_dtype", str(mu.get("ns_dtype", "bf16")), "bf16"),
                               ("cautious_wd", _bool(mu.get("cautious_wd", False), "optim.muon.cautious_wd"), False)):
            if value != ok:
                raise UsageError("optim.muon.%s: %r is not what torch.optim.Muon computes (only %r)" % (key, value, ok))
        if self.muon_adjust_lr not in ("original", "match_rms_adamw"):
            raise UsageError("optim.muon.adjust_lr %r: expected original or match_rms_adamw" % self.muon_adjust_lr)
        if _num(o.get("z_loss", 0) or 0, "optim.z_loss") != 0:
            raise UsageError("optim.z_loss is not implemented by this reference")
        self.steps = _int(t.get("steps", 2000), "train.steps")
        self.B = _int(t.get("batch_size", 16), "train.batch_size")
        if _int(t.get("accum", 1), "train.accum") != 1:
            raise UsageError("train.accum != 1 is not implemented by this reference")
        if str(t.get("device", "cpu")) != "cpu":
            raise UsageError("train.device: this reference benchmarks the CPU only")
        self.train_path = str(d.get("train", "data/toy/train.txt"))
        self.shuffle = _bool(d.get("shuffle", True), "data.shuffle")

    def block_kind(self, i):
        if self.layout == "mix":
            return "post" if i < self.mix_post else "pre"
        return self.layout

    def describe(self):
        return ("L=%d d=%d H=%d d_ff=%d ctx=%d B=%d V=%d; %s, %s, %s, %s pos, %s head"
                % (self.L, self.d, self.H, self.d_ff, self.ctx, self.B, self.V, self.layout,
                   self.norm_type, self.ffn, self.pos, "tied" if self.tie else "untied"))


def lr_at(c, s, total):
    """src/train/README.md; the same arithmetic as NormLab's lr_at."""
    import math
    if s < c.warmup:
        return c.lr * (s + 1) / c.warmup
    if c.schedule == "constant":
        return c.lr
    span = total - c.warmup
    progress = 1.0 if span <= 0 else min(max((s - c.warmup) / span, 0.0), 1.0)
    if c.schedule == "linear":
        return c.lr - (c.lr - c.min_lr) * progress
    return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------------------------
# data (data/README.md, NormLab's offset stream)
# ----------------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class Batches:
    """Windows of ctx + 1 tokens. The corpus is one tensor read once; the start offsets of
    micro-batch k are NormLab's: shuffle -> uniform in [0, N - ctx - 1] from splitmix64 seeded by
    (seed, k, row); else ((k*B + r) * ctx) mod (N - ctx - 1)."""

    def __init__(self, path, ctx, B, seed, shuffle, V):
        import numpy as np
        import torch
        if not os.path.isfile(path):
            raise UsageError("%s: data file not found" % path)
        if path.endswith(".bin"):
            arr = np.fromfile(path, dtype="<u2").astype(np.int32)   # torch 1.13 has no uint16
        else:
            arr = np.fromfile(path, dtype=np.uint8)
        self.data = torch.from_numpy(arr)
        self.N = int(self.data.numel())
        if self.N <= ctx + 1:
            raise UsageError("%s: corpus of %d tokens is too short for ctx %d" % (path, self.N, ctx))
        if int(arr.max()) >= V:
            raise UsageError("%s: token %d >= model.vocab_size %d" % (path, int(arr.max()), V))
        self.ctx, self.B, self.shuffle = ctx, B, shuffle
        self.key = _splitmix64((seed & _M64) ^ 0x6E6F726D6C6162)
        self.cols = torch.arange(ctx + 1, dtype=torch.int64).unsqueeze(0)   # (1, ctx+1), cached
        self.k = 0

    def offsets(self, k):
        B, ctx, N = self.B, self.ctx, self.N
        if self.shuffle:
            starts = N - ctx
            return [(_splitmix64((self.key + k * B + r) & _M64) * starts) >> 64 for r in range(B)]
        return [((k * B + r) * ctx) % (N - ctx - 1) for r in range(B)]

    def next(self):
        import torch
        off = torch.tensor(self.offsets(self.k), dtype=torch.int64).unsqueeze(1)
        self.k += 1
        w = self.data[off + self.cols].long()          # (B, ctx + 1) int64
        return w[:, :-1], w[:, 1:]


# ----------------------------------------------------------------------------------------------
# model (src/model/README.md); module registration order = NormLab's (fixes the init stream)
# ----------------------------------------------------------------------------------------------

def build_model(c):
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LayerNorm(nn.Module):
        def __init__(self, n, eps, bias):
            super().__init__()
            self.shape, self.eps = (n,), eps
            self.weight = nn.Parameter(torch.ones(n))
            if bias:
                self.bias = nn.Parameter(torch.zeros(n))
            else:
                self.register_parameter("bias", None)

        def forward(self, x):
            return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)

    class RMSNorm(nn.Module):
        def __init__(self, n, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def make_norm():
        if c.norm_type == "layernorm":
            return LayerNorm(c.d, c.norm_eps, c.norm_bias)
        return RMSNorm(c.d, c.norm_eps)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            # separate projections, as the contract names them and NormLab computes them
            self.q_proj = nn.Linear(c.d, c.d, bias=c.bias)
            self.k_proj = nn.Linear(c.d, c.d, bias=c.bias)
            self.v_proj = nn.Linear(c.d, c.d, bias=c.bias)
            self.out_proj = nn.Linear(c.d, c.d, bias=c.bias)
            self.H, self.dh = c.H, c.d // c.H
            self.scale = 1.0 / math.sqrt(self.dh)

        def forward(self, x, mask):
            B, T, C = x.shape
            H, dh = self.H, self.dh
            q = self.q_proj(x).view(B, T, H, dh).transpose(1, 2)       # (B, H, T, dh)
            k = self.k_proj(x).view(B, T, H, dh).transpose(1, 2)
            v = self.v_proj(x).view(B, T, H, dh).transpose(1, 2)
            if c.sdpa:  # the fused kernel: the same math with scale 1/sqrt(dh)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.out_proj(y.transpose(1, 2).reshape(B, T, C))
            # s = q k^T / sqrt(dh), causal mask, softmax (fp32). The scale and the mask are applied
            # in place on the fresh matmul output (neither backward needs the overwritten values).
            att = torch.matmul(q, k.transpose(-2, -1))
            att.mul_(self.scale)
            att.masked_fill_(mask[:T, :T], float("-inf"))
            att = torch.softmax(att, dim=-1)
            y = torch.matmul(att, v)                                    # (B, H, T, dh)
            return self.out_proj(y.transpose(1, 2).reshape(B, T, C))

    class Ffn(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(c.d, c.d_ff, bias=False)
            if c.ffn == "swiglu":
                self.gate = nn.Linear(c.d, c.d_ff, bias=False)
            self.fc2 = nn.Linear(c.d_ff, c.d, bias=False)
            self.swiglu = c.ffn == "swiglu"

        def forward(self, x):
            if self.swiglu:
                return self.fc2(F.silu(self.gate(x)) * self.fc1(x))
            return self.fc2(F.gelu(self.fc1(x)))                       # exact (erf) GELU

    SLOTS = {"pre": ("norm1", "norm2"), "post": ("norm1", "norm2"),
             "sandwich": ("norm1", "norm1_out", "norm2", "norm2_out"),
             "reordered": ("norm1_out", "norm2_out")}

    class Block(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind
            slots = SLOTS[kind]
            # NormLab's order: norm1, attn, norm1_out, norm2, ffn, norm2_out
            if "norm1" in slots:
                self.norm1 = make_norm()
            self.attn = Attention()
            if "norm1_out" in slots:
                self.norm1_out = make_norm()
            if "norm2" in slots:
                self.norm2 = make_norm()
            self.ffn = Ffn()
            if "norm2_out" in slots:
                self.norm2_out = make_norm()

        def forward(self, x, mask):
            k = self.kind
            if k == "pre":
                x = x + self.attn(self.norm1(x), mask)
                return x + self.ffn(self.norm2(x))
            if k == "post":
                x = self.norm1(x + self.attn(x, mask))
                return self.norm2(x + self.ffn(x))
            if k == "sandwich":
                x = x + self.norm1_out(self.attn(self.norm1(x), mask))
                return x + self.norm2_out(self.ffn(self.norm2(x)))
            x = x + self.norm1_out(self.attn(x, mask))                 # reordered
            return x + self.norm2_out(self.ffn(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(c.V, c.d)
            self.pos_emb = nn.Embedding(c.ctx, c.d)
            self.blocks = nn.ModuleList([Block(c.block_kind(i)) for i in range(c.L)])
            if c.layout != "post":
                self.final_norm = make_norm()
            else:
                self.final_norm = None
            if not c.tie:
                self.lm_head = nn.Linear(c.d, c.V, bias=False)
            # cached causal mask: True above the diagonal (the future), filled with -inf
            self.register_buffer("mask", torch.ones(c.ctx, c.ctx, dtype=torch.bool).triu(1),
                                 persistent=False)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.tok_emb(idx) + self.pos_emb.weight[:T]
            for b in self.blocks:
                x = b(x, self.mask)
            if self.final_norm is not None:
                x = self.final_norm(x)
            return F.linear(x, self.tok_emb.weight if c.tie else self.lm_head.weight)   # (B, T, V)

    model = GPT()
    init_weights(model, c)
    model.train()
    return model


def init_weights(model, c):
    """src/model/README.md, in named_parameters() order (as NormLab's init_weights)."""
    import math
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("tok_emb.weight", "pos_emb.weight"):
                p.normal_(0.0, c.embed_std)
                continue
            if p.dim() != 2:
                if name.endswith(".bias") and ("_proj." in name or ".fc" in name or ".gate." in name):
                    p.zero_()
                continue            # norm parameters keep their constructor values
            if c.init_scheme == "xavier":
                torch.nn.init.xavier_normal_(p, 1.0)
            else:
                std = c.init_std
                if c.scaled_residual and (name.endswith("out_proj.weight") or name.endswith("fc2.weight")):
                    std /= math.sqrt(2.0 * c.L)
                p.normal_(0.0, std)


# ----------------------------------------------------------------------------------------------
# benchmark
# ----------------------------------------------------------------------------------------------

def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


class Trainer:
    PHASES = ("data", "forward", "backward", "clip", "optim")

    def __init__(self, c, verbose, compile_model=False, precision="fp32"):
        import torch
        self.c, self.verbose = c, verbose
        self.bf16 = precision == "bf16"
        self.batches = Batches(c.train_path, c.ctx, c.B, c.seed, c.shuffle, c.V)
        torch.manual_seed(c.seed)
        self.model = build_model(c)
        # torch.compile'd forward (and so backward); the first warm-up steps pay the compilation
        self.forward = torch.compile(self.model) if compile_model else self.model
        self.params = [p for p in self.model.parameters()]
        embeddings = {id(self.model.tok_emb.weight), id(self.model.pos_emb.weight)}
        matrices = [p for p in self.params if p.dim() == 2 and id(p) not in embeddings]
        self.muon = None
        if c.optim_type == "muon":
            if not hasattr(torch.optim, "Muon"):
                raise UsageError("optim.type muon needs torch.optim.Muon (PyTorch >= 2.9); this is %s" % torch.__version__)
            self.muon = torch.optim.Muon(matrices, lr=c.muon_lr, weight_decay=c.weight_decay,
                                         momentum=c.muon_momentum, nesterov=c.muon_nesterov,
                                         ns_steps=c.muon_ns_steps, adjust_lr_fn=c.muon_adjust_lr)
            muon_ids = {id(p) for p in matrices}
            self.params_adamw = [p for p in self.params if id(p) not in muon_ids]
        else:
            self.params_adamw = self.params
        decay = [p for p in self.params_adamw if p.dim() >= 2]
        no_decay = [p for p in self.params_adamw if p.dim() < 2]
        # Update rule identical to src/train/README.md / NormLab's AdamW. foreach=False (1.13's
        # default, per-tensor in-place ops): on the CPU 1.13's multi-tensor path measured slower
        # (tiny: 7.6 ms vs 5.0 ms per step); 1.13 has no fused AdamW.
        # bf16: the fused AdamW (one kernel over all tensors), the fastest update PyTorch 2.x has.
        kind = {"fused": True} if self.bf16 else {"foreach": False}
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": c.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=c.lr, betas=c.betas, eps=c.eps, **kind)
        self.s = 0
        self.losses = []

    def step(self):
        """One timed training step; returns (total seconds, per-phase seconds)."""
        import torch
        import torch.nn.functional as F
        from time import perf_counter
        c = self.c
        t0 = perf_counter()
        x, y = self.batches.next()
        lr = lr_at(c, self.s, c.steps)
        for g in self.opt.param_groups:
            g["lr"] = lr
        if self.muon is not None:  # the same schedule: peak muon.lr times lr(s) / optim.lr
            for g in self.muon.param_groups:
                g["lr"] = c.muon_lr * lr / c.lr
        t1 = perf_counter()
        if self.bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.forward(x)
                loss = F.cross_entropy(logits.view(-1, c.V).float(), y.reshape(-1))
        else:
            logits = self.forward(x)
            loss = F.cross_entropy(logits.view(-1, c.V), y.reshape(-1))
        t2 = perf_counter()
        loss.backward()
        t3 = perf_counter()
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, c.grad_clip)
        t4 = perf_counter()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.muon is not None:
            self.muon.step()
            self.muon.zero_grad(set_to_none=True)
        t5 = perf_counter()
        lv = loss.item()
        self.losses.append(lv)
        phases = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
        if self.verbose:
            _log("step %4d  threads %d  loss %.4f  lr %.3e  %.4f s  (%s)"
                 % (self.s, torch.get_num_threads(), lv, lr, t5 - t0,
                    " ".join("%s %.4f" % kv for kv in zip(self.PHASES, phases))))
        self.s += 1
        return t5 - t0, phases

    def run(self, warmup, steps):
        for _ in range(warmup):
            self.step()
        times, phases = [], []
        for _ in range(steps):
            t, ph = self.step()
            times.append(t)
            phases.append(ph)
        per_phase = {name: median([p[i] for p in phases]) for i, name in enumerate(self.PHASES)}
        return median(times), per_phase, times


def gemm_peak(n=1024, warmup=3, repeats=10):
    """Best-of-`repeats` fp32 n x n x n torch.mm (into a preallocated output), in GFLOP/s."""
    import torch
    from time import perf_counter
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    out = torch.empty(n, n)
    for _ in range(warmup):
        torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        t0 = perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, perf_counter() - t0)
    del a, b, out
    return 2.0 * n ** 3 / best / 1e9


def blas_info():
    """OpenBLAS version string and pool size if OpenBLAS is the BLAS loaded; else None."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except (OSError, AttributeError):
        return None, None
    try:
        lib.openblas_get_config.restype = ctypes.c_char_p
        cfgs = lib.openblas_get_config().decode()
        return cfgs.split(" DYNAMIC")[0].split(" NO_")[0], int(lib.openblas_get_num_threads())
    except (AttributeError, OSError):
        return None, None


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def run_bench(args):
    import json
    import resource
    import torch

    raw = apply_sets(load_config(args.config), args.set)
    c = Cfg(raw)
    if args.variant != "eager" and int(torch.__version__.split(".")[0]) < 2:
        raise UsageError("--variant %s needs PyTorch 2.x; this is %s" % (args.variant, torch.__version__))
    if args.precision == "bf16" and tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
        raise UsageError("--precision bf16 needs PyTorch >= 2.4 (fused AdamW); this is %s" % torch.__version__)
    c.sdpa = args.variant in ("sdpa", "compile")
    tr = Trainer(c, args.verbose, compile_model=args.variant == "compile", precision=args.precision)
    n_params = sum(p.numel() for p in tr.params)
    emb = tr.model.tok_emb.weight.numel() + tr.model.pos_emb.weight.numel()
    n_nonemb = n_params - emb
    flops_tok = 6 * n_nonemb + 12 * c.L * c.d * c.ctx

    trials = {}
    if args.threads == "best":
        cands = sorted({1, 2} & set(range(1, cpu_count() + 1))) or [1]
        if len(cands) > 1:
            for t in cands:
                torch.set_num_threads(t)
                trials[t], _, _ = tr.run(1, args.trial_steps)
            threads = min(cands, key=lambda t: trials[t])
        else:
            threads = cands[0]
    else:
        threads = args.threads
    torch.set_num_threads(threads)

    # GEMM peak before and after the timed steps, the better kept (one short measurement can land in
    # a burst of stolen time on a shared VM), as normlab bench does
    peak_before = gemm_peak()
    first = len(tr.losses)
    med, phases, times = tr.run(args.warmup, args.steps)
    tokens_s = c.B * c.ctx / med
    gflops = flops_tok * tokens_s / 1e9
    peak = max(peak_before, gemm_peak())
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    blas, blas_threads = blas_info()
    blas_threading = openblas_threading()

    res = {
        "impl": "pytorch",
        "optim": c.optim_type,
        "variant": args.variant,
        "precision": args.precision,
        "config": args.config,
        "threads": threads,
        "median_step_s": med,
        "tokens_per_s": tokens_s,
        "flops_per_token": flops_tok,
        "gflops": gflops,
        "gemm_peak_gflops": peak,
        "mfu": gflops / peak,
        "peak_rss_mib": rss_mib,
        "params": n_params,
        "non_embedding_params": n_nonemb,
        # extras
        "flops_formula": "6 x %d + 12 x %d x %d x %d" % (n_nonemb, c.L, c.d, c.ctx),
        "thread_trials_median_s": {str(k): v for k, v in trials.items()},
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "blas": blas, "blas_threads": blas_threads, "blas_threading": blas_threading,
        "torch": torch.__version__,
        "batch_size": c.B, "ctx": c.ctx, "tokens_per_step": c.B * c.ctx,
        "steps": args.steps, "warmup": args.warmup,
        "min_step_s": min(times), "max_step_s": max(times),
        "phase_median_s": phases,
        "loss_first": tr.losses[0], "loss_last": tr.losses[-1],
        "gemm": "1024x1024x1024 fp32 torch.mm, best of 10 before and 10 after the timed steps",
    }
    if args.json:
        print(json.dumps(res), flush=True)
        return 0

    def row(k, v):
        print("%-16s %s" % (k, v))
    print("NormLab reference benchmark: PyTorch %s (Python, %s), %s" % (torch.__version__, args.variant, c.describe()))
    row("config", args.config)
    row("params", "{:,} ({:,} non-embedding)".format(n_params, n_nonemb))
    tr_txt = ""
    if trials:
        tr_txt = "; trials " + ", ".join("%d: %.4f s" % (k, v) for k, v in sorted(trials.items()))
    row("threads", "%d (%s%s)" % (threads, "best" if trials else "fixed", tr_txt))
    row("environment", "OMP_WAIT_POLICY=%s, %s (%s) with %s threads"
        % (os.environ.get("OMP_WAIT_POLICY"), blas or "BLAS ?", blas_threading or "?",
           blas_threads if blas_threads else "?"))
    row("steps", "%d timed after %d warm-up (+%d trial steps)" % (args.steps, args.warmup, first))
    row("median step", "%.4f s  (min %.4f, max %.4f)" % (med, min(times), max(times)))
    row("  phases", "  ".join("%s %.4f" % kv for kv in phases.items()))
    row("tokens/s", "{:,.0f}".format(tokens_s))
    row("FLOPs/token", "{:,} = 6 x {:,} + 12 x {} x {} x {}".format(flops_tok, n_nonemb, c.L, c.d, c.ctx))
    row("achieved", "%.1f GFLOP/s" % gflops)
    row("GEMM peak", "%.1f GFLOP/s (1024^3 fp32 torch.mm, best of 10 before and 10 after the timed steps)" % peak)
    row("MFU", "%.1f%%" % (100.0 * gflops / peak))
    row("peak RSS", "%.1f MiB" % rss_mib)
    row("loss", "%.4f (step 0) -> %.4f (step %d)" % (tr.losses[0], tr.losses[-1], len(tr.losses) - 1))
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ensure_environment()
    try:
        return run_bench(args)
    except UsageError as e:
        _log("error: %s" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
