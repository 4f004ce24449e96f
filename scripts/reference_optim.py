#!/usr/bin/env python3
"""Independent float64 reference of NormLab's optimizers (AdamW, Muon, NorMuon).

Written from NormLab's optimizer contract (AdamW as src/train/README.md, Optimisation, states it;
parameter roles; Muon and NorMuon) without reading the C++ optimizer, so that a C++ test can
compare the two.

    reference_optim.py step --in IN.safetensors --out OUT.safetensors
        -> applies K updates to the parameters of IN and writes the parameters and the optimizer
           states after the K-th update to OUT (all F64; --out-dtype F32 rounds them to float32)
    reference_optim.py example --out IN.safetensors [--type adamw|muon|normuon] [--ns keller|polar_express]
                               [--ns-dtype fp32|bf16] [--K 3] [--seed 0]
        -> writes a small synthetic IN file (for trying `step` by hand)
    reference_optim.py selftest   (or --self-test)
        -> internal consistency checks, no C++ involved; exit 1 on any failure

Only the standard library and numpy are used. All arithmetic is float64, except where the bf16
Newton-Schulz iteration is emulated (ns_dtype bf16, below).

INPUT (IN.safetensors; standard safetensors, tensors F32 or F64, little-endian)
  w0.<name>        the value of parameter <name> before the first update
  g<k>.<name>      the gradient of <name> used by update k, k = 1..K (already averaged over
                   micro-batches and globally clipped: nothing here clips)
  __metadata__["config"], a JSON object:
    {"type": "adamw"|"muon"|"normuon", "K": K, "lr": optim.lr, "f": [f(1), ..., f(K)],
     "betas": [b1, b2], "eps": 1e-8, "weight_decay": lambda,
     "lr_mult": {"embedding":..,"head":..,"gain":..,"bias":..,"mixing":..},
     "muon": {"lr", "momentum", "nesterov", "ns", "ns_steps", "ns_dtype", "adjust_lr", "beta2",
              "cautious_wd"},
     "roles": {"<name>": "matrix"|"embedding"|"head"|"gain"|"bias"|"mixing"},
     "param": {"type": "sp"|"mup"|"completep", "m_n": m_N, "m_l": m_L, "alpha": alpha}}  (optional)
  f(k) is the schedule factor lr(k)/optim.lr of update k; it is given, never computed here.
  Missing lr_mult / muon keys take the contract's defaults (lr_mult 1; muon lr 0.02, momentum
  0.95, nesterov true, ns keller, ns_steps 5, ns_dtype bf16, adjust_lr original, beta2 0.95,
  cautious_wd false); unknown keys, unknown roles, a parameter without a role (or a role without
  a parameter), a missing / mis-shaped / unexpected tensor are errors (exit 2).
OUTPUT (OUT.safetensors, every tensor F64)
  w.<name>               the parameter after K updates
  m.<name>, v.<name>     AdamW's first and second moments, for every AdamW-updated parameter
  muon_momentum.<name>   Muon's momentum M, for every `matrix` parameter under muon / normuon
  normuon_v.<name>       NorMuon's row second moment V, shape [A, 1], under normuon
  metadata: "config" (the input's config, echoed), "generator".

THE MATH, in this file's words
  Parametrization (optional "param"; absent = sp, every factor 1). A parameter is "in a block" when
  its name starts with "blocks.". With d = m_L^(alpha - 1) under completep (1 otherwise):
    mup, completep, AdamW-updated matrix: rate x 1/m_N x d, lambda x m_N (so rate * lambda per
      step does not change with width);
    mup, completep, Muon-updated matrix: eta x d (lambda unchanged; Muon's decay is eta * lambda,
      so it follows eta);
    completep, gain and bias in a block: rate x d; everything else: unchanged.

  Roles decide both the optimizer and the weight decay: decay (rate lambda) applies to roles
  matrix, embedding and head only, whatever the optimizer; gain, bias and mixing never decay.

  AdamW (every role under type adamw; every role but matrix under muon / normuon). Update k
  (k = 1, 2, ...) with gradient g and rate r = lr * mult(role) * f(k), mult = lr_mult[role]
  (mult = 1 for matrix under adamw). As torch.optim.AdamW computes it:
      W <- W * (1 - r * lambda)                         (decaying roles only; before the step)
      m <- b1 m + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2 (m = v = 0 before update 1)
      c1 = 1 - b1^k ;  c2 = 1 - b2^k
      W <- W - (r / c1) * m / (sqrt(v) / sqrt(c2) + eps)
  so eps is added to the bias-corrected sqrt(v), not to sqrt of the corrected v's numerator.
  Update 1 therefore moves each element by r * g / (|g| + eps), about r * sign(g).

  Muon (role matrix under muon / normuon), W of shape [A, B] (out, in), momentum mu, M = 0:
      M <- mu M + (1 - mu) G          (torch.optim.Muon writes it M.lerp_(G, 1 - mu):
                                       M + (1 - mu)(G - M), the same value)
      U = (1 - mu) G + mu M  if nesterov (torch: G.lerp(M, mu)), else U = M
      O = NS(U)              (below); normuon: O <- NorMuon(O) (below)
      eta = muon.lr * f(k) ;  eta' = eta * adjust(A, B)
        adjust "original":        sqrt(max(1, A / B))
        adjust "match_rms_adamw": 0.2 * sqrt(max(A, B))
      K = 1, or with cautious_wd the mask [O * W >= 0] (elementwise, W before this update)
      W <- W - eta' O - eta * lambda * (W * K)
  torch.optim.Muon applies the decay as W.mul_(1 - eta*lambda) and then W.add_(O, -eta'): the
  same value, since O does not depend on W. The decay rate uses eta, not eta'.

  NS(U), Newton-Schulz orthogonalisation:
      X = U, transposed when A > B, so X is r x c with r <= c
      keller:        X <- X / max(||X||_F, 1e-7); then ns_steps times (a, b, c) =
                     (3.4445, -4.7750, 2.0315)
      polar_express: X <- X / (1.02 ||X||_F + 1e-6); then 5 steps, step j with row j of
                     POLAR_EXPRESS below (ns_steps must be 5)
      each step:     S = X X^T ;  X <- a X + (b S + c S S) X
      transpose back; O = X.
  ns_dtype fp32: all of it in float64 here (the C++ runs fp32; a test compares at a tolerance).
  ns_dtype bf16 emulates torch.optim.Muon's _zeropower_via_newtonschulz (torch 2.11; earlier
  versions call this sequence use_addmm=True):
      X = U.bfloat16(); transpose when rows > cols; X.div_(X.norm().clamp(min=eps));
      per step: gram = X @ X.T; gram_update = addmm(gram, gram, gram, beta=b, alpha=c)
      (= b gram + c gram@gram); X = addmm(X, gram_update, X, beta=a) (= a X + gram_update @ X).
  Emulation: every operation is computed in float64 from bf16-valued operands and its result is
  rounded once to bf16 (value -> float32 -> bf16 with round-to-nearest-even on the float32 bit
  pattern): U itself, the Frobenius norm, the clamp, the division, each gram product, each addmm.
  For polar_express the normaliser is rounded op by op too: n = bf16(||X||), d = bf16(bf16(1.02 n)
  + 1e-6), X = bf16(X / d). A real bf16 GEMM accumulates in float32 in an order
  of its own, so agreement with any bf16 implementation is approximate. Measured once against
  torch 2.11's _zeropower_via_newtonschulz (keller, 5 steps, Gaussian U): bit-identical for 16x48
  and 48x16 (CUDA; CPU 3.8e-5 relative Frobenius for 16x48), 1.4e-3 for 64x64, 3e-3 for 256x1024
  (CPU and CUDA), where bf16 and float64 NS differ by 1.2e-2..1.5e-2; three torch.optim.Muon steps
  on a 24x8 float32 parameter agreed with this file's bf16 Muon to 1.5e-6 of the update. So
  compare bf16 at a looser tolerance (~1e-2 of the update), fp32 at ~1e-3 of the update size.
  polar_express is more sensitive still: its coefficients equioscillate (singular values land
  anywhere in about [0.85, 1.14]) and the map is steep near 1, so a singular value near the top
  of the spectrum can move by up to ~0.2 under bf16 rounding (a rank-1 U is the worst case); test
  polar_express bf16 on well-spread random matrices, at a loose tolerance. The bf16 result is
  exactly representable in float32, hence "O = X in fp32".

  NorMuon (the authors' code, zichongli5/NorMuon), on O in its [A, B] orientation, V [A, 1] = 0:
      v = mean over the B columns of O^2 (one value per row)
      V <- beta2 V + (1 - beta2) v            (the authors: V.lerp_(v, 1 - beta2); no bias correction)
      O' = O / (sqrt(V) + 1e-10)
      O <- O' * ||O||_F / (||O'||_F + 1e-10)   (the update keeps O's Frobenius norm)
  then eta' and the decay as for Muon (the authors too scale by sqrt(max(1, A/B)) after this).

READINGS (where the contract leaves a choice; each follows torch.optim.AdamW / torch.optim.Muon /
the NorMuon authors' code):
 R1 AdamW's eps goes outside the bias correction: sqrt(v)/sqrt(1 - b2^k) + eps (torch), and the
    decay multiplies W by (1 - r lambda) before the Adam step is subtracted.
 R2 Decay follows roles (matrix, embedding, head) for type adamw as well. The older wording
    "parameters with 2 or more dimensions" would also decay 2-D gain/bias/mixing tensors (e.g. a
    hyper-connection's [n, m] mixing weights); the roles rule, which the contract says is the one
    for every optimizer, leaves them undecayed.
 R3 Muon's decay rate is eta * lambda (un-adjusted eta), as torch.optim.Muon (lr * weight_decay)
    and the NorMuon authors do; the cautious mask uses the final O (after NorMuon) and W before
    the update; O * W = 0 counts as >= 0 (decayed).
 R4 Muon's state M and NorMuon's V carry no bias correction; f(k) scales eta, not M.
 R5 The NorMuon row statistic is over the B (input) columns of the un-transposed O, whatever NS
    transposed internally; NorMuon runs at full precision (float64 here) on the NS output, also
    when ns_dtype is bf16.
 R6 One AdamW step counter k for every AdamW parameter, starting at 1 with update 1.
 R7 bf16: "U rounded to bf16 and every product in bf16" is read as torch 2.11's addmm
    sequence above, one rounding per op result; the keller clamp rounds eps to bf16 as torch's
    clamp on a bf16 tensor would (it only matters for U = 0, which gives O = 0).
 R8 polar_express with ns_steps other than 5 is an error (the contract's rule), as is a
    `matrix` parameter that is not 2-D under muon / normuon.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

import safetensors_io as _st   # scripts/safetensors_io.py, shared with reference_model.py


class ContractError(Exception):
    """The input violates the interface / contract as this reference reads it."""


KELLER = (3.4445, -4.7750, 2.0315)
KELLER_EPS = 1e-7
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
NORMUON_EPS = 1e-10
ROLES = ("matrix", "embedding", "head", "gain", "bias", "mixing")
DECAY_ROLES = ("matrix", "embedding", "head")
LR_MULT_ROLES = ("embedding", "head", "gain", "bias", "mixing")
MUON_DEFAULTS = {"lr": 0.02, "momentum": 0.95, "nesterov": True, "ns": "keller", "ns_steps": 5,
                 "ns_dtype": "bf16", "adjust_lr": "original", "beta2": 0.95, "cautious_wd": False}
TYPES = ("adamw", "muon", "normuon")


# ----------------------------------------------------------------------------------------------
# bf16 rounding
# ----------------------------------------------------------------------------------------------

def bf16_round(x):
    """Round to bfloat16 values (returned as float64): the value is first rounded to float32,
    then the float32 bit pattern is rounded to its upper 16 bits, to nearest, ties to even.
    Infinities stay, NaN stays NaN, a finite value past bf16's largest rounds to infinity."""
    a = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.ascontiguousarray(a.astype(np.float32))
    bits = f.view(np.uint32).astype(np.uint64)
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    rounded = ((bits + np.uint64(0x7FFF) + lsb) & np.uint64(0xFFFF0000)).astype(np.uint32)
    out = rounded.view(np.float32).astype(np.float64)
    nan = np.isnan(f)
    if np.any(nan):
        out = np.where(nan, np.nan, out)
    return out.reshape(a.shape) if a.shape else np.float64(out.reshape(()))


def _identity(x):
    return np.asarray(x, dtype=np.float64)


# ----------------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------------

def read_safetensors(path):
    """F32 or F64 tensors; anything else, or a malformed file, is a ContractError."""
    return _st.read_safetensors(path, dtypes=("F32", "F64"), error=ContractError)


def write_safetensors(path, tensors, metadata, dtype="F64"):
    _st.write_safetensors(path, tensors, metadata, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------

def _num(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ContractError("config %s: a finite number expected, got %r" % (what, v))
    return float(v)


def _bool(v, what):
    if not isinstance(v, bool):
        raise ContractError("config %s: true or false expected, got %r" % (what, v))
    return v


def parse_config(raw):
    if not isinstance(raw, dict):
        raise ContractError("config: a JSON object expected")
    known = {"type", "K", "lr", "f", "betas", "eps", "weight_decay", "lr_mult", "muon", "roles", "param"}
    extra = sorted(set(raw) - known)
    if extra:
        raise ContractError("config: unknown key(s) %s" % extra)
    for key in ("type", "K", "lr", "f", "betas", "eps", "weight_decay", "roles"):
        if key not in raw:
            raise ContractError("config: missing key %r" % key)
    c = {}
    c["type"] = raw["type"]
    if c["type"] not in TYPES:
        raise ContractError("config type: one of %s expected, got %r" % (TYPES, raw["type"]))
    K = raw["K"]
    if isinstance(K, bool) or not isinstance(K, int) or K < 0:
        raise ContractError("config K: a non-negative integer expected, got %r" % (K,))
    c["K"] = K
    c["lr"] = _num(raw["lr"], "lr")
    if not isinstance(raw["f"], list) or len(raw["f"]) != K:
        raise ContractError("config f: a list of K=%d numbers expected" % K)
    c["f"] = [_num(v, "f[%d]" % i) for i, v in enumerate(raw["f"])]
    if not isinstance(raw["betas"], list) or len(raw["betas"]) != 2:
        raise ContractError("config betas: [b1, b2] expected")
    c["betas"] = (_num(raw["betas"][0], "betas[0]"), _num(raw["betas"][1], "betas[1]"))
    c["eps"] = _num(raw["eps"], "eps")
    c["weight_decay"] = _num(raw["weight_decay"], "weight_decay")

    lm = raw.get("lr_mult", {}) or {}
    if not isinstance(lm, dict):
        raise ContractError("config lr_mult: an object expected")
    extra = sorted(set(lm) - set(LR_MULT_ROLES))
    if extra:
        raise ContractError("config lr_mult: unknown role(s) %s (only %s)" % (extra, LR_MULT_ROLES))
    c["lr_mult"] = {r: _num(lm.get(r, 1.0), "lr_mult.%s" % r) for r in LR_MULT_ROLES}
    c["lr_mult"]["matrix"] = 1.0

    mu = raw.get("muon", {}) or {}
    if not isinstance(mu, dict):
        raise ContractError("config muon: an object expected")
    extra = sorted(set(mu) - set(MUON_DEFAULTS))
    if extra:
        raise ContractError("config muon: unknown key(s) %s" % extra)
    m = dict(MUON_DEFAULTS)
    m.update(mu)
    m["lr"] = _num(m["lr"], "muon.lr")
    m["momentum"] = _num(m["momentum"], "muon.momentum")
    m["beta2"] = _num(m["beta2"], "muon.beta2")
    m["nesterov"] = _bool(m["nesterov"], "muon.nesterov")
    m["cautious_wd"] = _bool(m["cautious_wd"], "muon.cautious_wd")
    if m["ns"] not in ("keller", "polar_express"):
        raise ContractError("config muon.ns: keller or polar_express expected, got %r" % (m["ns"],))
    if isinstance(m["ns_steps"], bool) or not isinstance(m["ns_steps"], int) or m["ns_steps"] < 1:
        raise ContractError("config muon.ns_steps: a positive integer expected")
    if m["ns"] == "polar_express" and m["ns_steps"] != 5:
        raise ContractError("config muon.ns_steps: polar_express takes 5 steps only, got %d"
                            % m["ns_steps"])
    if m["ns_dtype"] not in ("fp32", "bf16"):
        raise ContractError("config muon.ns_dtype: fp32 or bf16 expected, got %r" % (m["ns_dtype"],))
    if m["adjust_lr"] not in ("original", "match_rms_adamw"):
        raise ContractError("config muon.adjust_lr: original or match_rms_adamw expected, got %r"
                            % (m["adjust_lr"],))
    c["muon"] = m

    pz = raw.get("param", {}) or {}
    if not isinstance(pz, dict) or sorted(set(pz) - {"type", "m_n", "m_l", "alpha"}):
        raise ContractError("config param: {type, m_n, m_l, alpha} expected")
    c["param"] = {"type": pz.get("type", "sp"), "m_n": _num(pz.get("m_n", 1.0), "param.m_n"),
                  "m_l": _num(pz.get("m_l", 1.0), "param.m_l"), "alpha": _num(pz.get("alpha", 1.0), "param.alpha")}
    if c["param"]["type"] not in ("sp", "mup", "completep"):
        raise ContractError("config param.type: sp, mup or completep expected, got %r" % (c["param"]["type"],))

    roles = raw["roles"]
    if not isinstance(roles, dict):
        raise ContractError("config roles: an object {name: role} expected")
    for name, role in roles.items():
        if role not in ROLES:
            raise ContractError("config roles[%s]: one of %s expected, got %r" % (name, ROLES, role))
    c["roles"] = dict(roles)
    return c


def split_input(tensors, cfg):
    """-> (w0 {name: array}, grads [ {name: array} for k = 1..K ]), strictly checked."""
    K = cfg["K"]
    w0, grads = {}, [dict() for _ in range(K)]
    for key, arr in tensors.items():
        prefix, dot, name = key.partition(".")
        if not dot or not name:
            raise ContractError("tensor %s: expected w0.<name> or g<k>.<name>" % key)
        if prefix == "w0":
            w0[name] = arr
        elif prefix.startswith("g") and prefix[1:].isdigit() and prefix[1] != "0":
            k = int(prefix[1:])
            if not 1 <= k <= K:
                raise ContractError("tensor %s: update %d outside 1..K=%d" % (key, k, K))
            grads[k - 1][name] = arr
        else:
            raise ContractError("tensor %s: expected w0.<name> or g<k>.<name>" % key)
    missing_roles = sorted(set(w0) - set(cfg["roles"]))
    if missing_roles:
        raise ContractError("parameters without a role: %s" % missing_roles)
    missing_params = sorted(set(cfg["roles"]) - set(w0))
    if missing_params:
        raise ContractError("roles name parameters without w0.<name>: %s" % missing_params)
    for k in range(K):
        extra = sorted(set(grads[k]) - set(w0))
        if extra:
            raise ContractError("gradients g%d of unknown parameters: %s" % (k + 1, extra))
        for name, w in w0.items():
            if name not in grads[k]:
                raise ContractError("missing tensor g%d.%s" % (k + 1, name))
            if grads[k][name].shape != w.shape:
                raise ContractError("g%d.%s has shape %s, w0.%s has %s"
                                    % (k + 1, name, list(grads[k][name].shape), name, list(w.shape)))
    if cfg["type"] != "adamw":
        for name, w in w0.items():
            if cfg["roles"][name] == "matrix" and w.ndim != 2:
                raise ContractError("%s: role matrix under %s needs a 2-D tensor, shape %s"
                                    % (name, cfg["type"], list(w.shape)))
    return w0, grads


# ----------------------------------------------------------------------------------------------
# the math
# ----------------------------------------------------------------------------------------------

def newton_schulz(U, ns="keller", ns_steps=5, ns_dtype="fp32"):
    """O = NS(U) for a 2-D U (see the module docstring); float64, bf16-valued for bf16."""
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2:
        raise ContractError("NS needs a 2-D matrix, shape %s" % list(U.shape))
    rnd = bf16_round if ns_dtype == "bf16" else _identity
    X = rnd(U)
    transposed = U.shape[0] > U.shape[1]
    if transposed:
        X = X.T
    norm = rnd(np.sqrt(np.sum(X * X)))
    if ns == "keller":
        X = rnd(X / rnd(max(float(norm), KELLER_EPS)))
        coeffs = [KELLER] * ns_steps
    elif ns == "polar_express":
        if ns_steps != 5:
            raise ContractError("polar_express takes 5 steps only, got %d" % ns_steps)
        X = rnd(X / rnd(rnd(1.02 * norm) + 1e-6))
        coeffs = POLAR_EXPRESS
    else:
        raise ContractError("unknown ns %r" % (ns,))
    for a, b, c in coeffs:
        S = rnd(X @ X.T)
        upd = rnd(b * S + c * (S @ S))
        X = rnd(a * X + upd @ X)
    if transposed:
        X = X.T
    return np.ascontiguousarray(X)


def normuon_normalize(O, V, beta2):
    """-> (O_new, V_new): NorMuon's per-row normalisation of an [A, B] update O, state V [A, 1]."""
    v = np.mean(O * O, axis=1, keepdims=True)
    V = beta2 * V + (1.0 - beta2) * v
    Op = O / (np.sqrt(V) + NORMUON_EPS)
    scale = np.sqrt(np.sum(O * O)) / (np.sqrt(np.sum(Op * Op)) + NORMUON_EPS)
    return Op * scale, V


def adjust_ratio(A, B, mode):
    if mode == "original":
        return math.sqrt(max(1.0, A / B))
    if mode == "match_rms_adamw":
        return 0.2 * math.sqrt(max(A, B))
    raise ContractError("unknown adjust_lr %r" % (mode,))


def adamw_update(W, g, m, v, k, rate, betas, eps, decay):
    """One torch.optim.AdamW update (step k >= 1, rate r, decay = r*lambda applied or 0)."""
    b1, b2 = betas
    W = W * (1.0 - rate * decay)
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    c1 = 1.0 - b1 ** k
    c2 = 1.0 - b2 ** k
    denom = np.sqrt(v) / math.sqrt(c2) + eps
    W = W - (rate / c1) * (m / denom)
    return W, m, v


def muon_update(W, G, M, V, f, mcfg, weight_decay, normuon):
    """One Muon (normuon: NorMuon) update of a [A, B] matrix; returns (W, M, V, O)."""
    mu = mcfg["momentum"]
    M = mu * M + (1.0 - mu) * G
    U = (1.0 - mu) * G + mu * M if mcfg["nesterov"] else M
    O = newton_schulz(U, mcfg["ns"], mcfg["ns_steps"], mcfg["ns_dtype"])
    if normuon:
        O, V = normuon_normalize(O, V, mcfg["beta2"])
    A, B = W.shape
    eta = mcfg["lr"] * f
    eta_adj = eta * adjust_ratio(A, B, mcfg["adjust_lr"])
    Kmask = (O * W >= 0).astype(np.float64) if mcfg["cautious_wd"] else 1.0
    W = W - eta_adj * O - eta * weight_decay * (W * Kmask)
    return W, M, V, O


def param_factors(pz, role, in_block, muon_rule):
    """-> (rate factor, decay factor) of one parameter under the parametrization pz."""
    if pz["type"] == "sp":
        return 1.0, 1.0
    depth = pz["m_l"] ** (pz["alpha"] - 1.0) if pz["type"] == "completep" else 1.0
    if role == "matrix":
        if muon_rule:
            return depth, 1.0
        return depth / pz["m_n"], pz["m_n"]
    if role in ("gain", "bias") and in_block:
        return depth, 1.0
    return 1.0, 1.0


def run(cfg, w0, grads):
    """Apply the K updates; -> the OUT tensor dict (see the module docstring)."""
    typ = cfg["type"]
    roles = cfg["roles"]
    lam = cfg["weight_decay"]
    W = {n: np.array(w, dtype=np.float64) for n, w in w0.items()}
    uses_muon = {n: typ != "adamw" and roles[n] == "matrix" for n in W}
    m = {n: np.zeros_like(W[n]) for n in W if not uses_muon[n]}
    v = {n: np.zeros_like(W[n]) for n in W if not uses_muon[n]}
    M = {n: np.zeros_like(W[n]) for n in W if uses_muon[n]}
    V = {n: np.zeros((W[n].shape[0], 1)) for n in W if uses_muon[n]}
    for k in range(1, cfg["K"] + 1):
        f = cfg["f"][k - 1]
        g = grads[k - 1]
        for n in sorted(W):
            role = roles[n]
            lr_f, decay_f = param_factors(cfg["param"], role, n.startswith("blocks."), uses_muon[n])
            decay = lam * decay_f if role in DECAY_ROLES else 0.0
            if uses_muon[n]:
                W[n], M[n], V[n], _ = muon_update(W[n], g[n], M[n], V[n], f * lr_f, cfg["muon"], decay,
                                                  typ == "normuon")
            else:
                rate = cfg["lr"] * cfg["lr_mult"][role] * lr_f * f
                W[n], m[n], v[n] = adamw_update(W[n], g[n], m[n], v[n], k, rate, cfg["betas"],
                                                cfg["eps"], decay)
    out = {}
    for n in W:
        out["w." + n] = W[n]
        if uses_muon[n]:
            out["muon_momentum." + n] = M[n]
            if typ == "normuon":
                out["normuon_v." + n] = V[n]
        else:
            out["m." + n] = m[n]
            out["v." + n] = v[n]
    return out


def step_files(in_path, out_path, out_dtype="F64"):
    tensors, meta = read_safetensors(in_path)
    if "config" not in meta:
        raise ContractError("%s: __metadata__ has no \"config\"" % in_path)
    try:
        raw = json.loads(meta["config"])
    except ValueError as e:
        raise ContractError("__metadata__ config is not JSON: %s" % e)
    cfg = parse_config(raw)
    w0, grads = split_input(tensors, cfg)
    out = run(cfg, w0, grads)
    write_safetensors(out_path, out, {"config": meta["config"],
                                      "generator": "scripts/reference_optim.py"}, dtype=out_dtype)
    return out


# ----------------------------------------------------------------------------------------------
# example input
# ----------------------------------------------------------------------------------------------

def example_config(typ="muon", ns="keller", ns_dtype="fp32", K=3, **muon_over):
    muon = dict(MUON_DEFAULTS)
    muon.update({"ns": ns, "ns_dtype": ns_dtype})
    muon.update(muon_over)
    return {"type": typ, "K": K, "lr": 3e-3, "f": [0.5 + 0.5 * k / max(K, 1) for k in range(1, K + 1)],
            "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
            "lr_mult": {"embedding": 1, "head": 2, "gain": 0.5, "bias": 1, "mixing": 3},
            "muon": muon,
            "roles": {"tok_emb.weight": "embedding", "lm_head.weight": "head",
                      "blocks.0.attn.q_proj.weight": "matrix", "blocks.0.ffn.fc1.weight": "matrix",
                      "blocks.0.ffn.fc2.weight": "matrix", "blocks.0.norm1.weight": "gain",
                      "blocks.0.ffn.fc1.bias": "bias", "blocks.0.hc_alpha": "mixing"}}


EXAMPLE_SHAPES = {"tok_emb.weight": (11, 8), "lm_head.weight": (11, 8),
                  "blocks.0.attn.q_proj.weight": (8, 8), "blocks.0.ffn.fc1.weight": (24, 8),
                  "blocks.0.ffn.fc2.weight": (8, 24), "blocks.0.norm1.weight": (8,),
                  "blocks.0.ffn.fc1.bias": (24,), "blocks.0.hc_alpha": (4, 2)}


def example_tensors(cfg, seed=0):
    rng = np.random.default_rng(seed)
    t = {}
    for n in cfg["roles"]:
        shape = EXAMPLE_SHAPES[n]
        t["w0." + n] = rng.normal(0.0, 0.1, shape)
        for k in range(1, cfg["K"] + 1):
            t["g%d.%s" % (k, n)] = rng.normal(0.0, 0.01, shape)
    return t


def write_example(path, cfg, seed=0, dtype="F32"):
    write_safetensors(path, example_tensors(cfg, seed), {"config": json.dumps(cfg)}, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# selftest
# ----------------------------------------------------------------------------------------------

def selftest():
    failures = []
    count = [0]

    def check(cond, what):
        count[0] += 1
        print("%s  %s" % ("ok  " if cond else "FAIL", what))
        if not cond:
            failures.append(what)

    rng = np.random.default_rng(1234)

    # --- bf16 rounding on known values
    known = [(1.0, 1.0), (1.0 + 2.0 ** -8, 1.0), (1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -6),
             (1.0 + 2.0 ** -8 + 2.0 ** -20, 1.0 + 2.0 ** -7), (1.0 + 2.0 ** -7, 1.0 + 2.0 ** -7),
             (-(1.0 + 2.0 ** -8), -1.0), (math.pi, 3.140625), (0.1, 0.10009765625),
             (65504.0, 65536.0), (0.0, 0.0), (2.0 ** -130, 2.0 ** -130),
             (3.3895313892515355e38, 3.3895313892515355e38),     # bf16's largest finite
             (3.4028234663852886e38, math.inf),                 # float32's largest: rounds up
             (-math.inf, -math.inf), (1e-45, 0.0)]
    for x, want in known:
        got = float(bf16_round(x))
        check(got == want, "bf16_round(%r) = %r (expected %r)" % (x, got, want))
    check(math.copysign(1.0, float(bf16_round(-0.0))) < 0, "bf16_round(-0.0) keeps the sign")
    check(math.isnan(float(bf16_round(math.nan))), "bf16_round(nan) is nan")
    r = rng.normal(size=1000) * 10.0 ** rng.integers(-20, 20, size=1000)
    rb = bf16_round(r)
    check(np.array_equal(bf16_round(rb), rb), "bf16_round is idempotent")
    check(np.all(np.abs(rb - r) <= np.abs(r) * (2.0 ** -8 + 2.0 ** -23)),
          "bf16_round error <= half a bf16 ulp (2^-8 relative)")
    bits = rb.astype(np.float32).view(np.uint32)
    check(np.all(bits & 0xFFFF == 0), "bf16 values have zero low 16 float32 bits")

    # --- Newton-Schulz
    def svals(X):
        return np.linalg.svd(X, compute_uv=False)

    def poly(x, coeffs):
        for a, b, c in coeffs:
            x = a * x + b * x ** 3 + c * x ** 5
        return x

    for shape in ((16, 48), (48, 16), (24, 24), (1, 8), (8, 1)):
        U = rng.normal(size=shape)
        if shape[0] == shape[1]:   # keep the square test matrix away from near-singular
            q1, _ = np.linalg.qr(rng.normal(size=shape))
            q2, _ = np.linalg.qr(rng.normal(size=shape))
            U = q1 @ np.diag(np.linspace(0.2, 3.0, shape[0])) @ q2
        for dt in ("fp32", "bf16"):
            Ok = newton_schulz(U, "keller", 5, dt)
            s = svals(Ok)
            check(Ok.shape == U.shape and s.min() > 0.6 and s.max() < 1.25,
                  "keller %s %s: singular values in [0.6, 1.25] (%.3f .. %.3f)"
                  % (dt, shape, s.min(), s.max()))
            Op = newton_schulz(U, "polar_express", 5, dt)
            s = svals(Op)
            # these coefficients equioscillate: the scalar map sends [1e-3, 1]/1.02 to [0.847, 1.141]
            check(s.min() > 0.84 and s.max() < 1.15, "polar_express %s %s: singular values in "
                  "[0.84, 1.15] (%.3f .. %.3f)" % (dt, shape, s.min(), s.max()))
            if dt == "fp32":
                # NS acts on each singular value as the odd scalar polynomial, exactly
                s_in = svals(U) / np.linalg.norm(U)
                nU = np.linalg.norm(U)
                for ns, coeffs, x0 in (("keller", [KELLER] * 5, s_in),
                                       ("polar_express", POLAR_EXPRESS, s_in * nU / (1.02 * nU + 1e-6))):
                    s_out = svals(newton_schulz(U, ns, 5, dt))
                    s_want = poly(x0, coeffs)
                    check(np.allclose(np.sort(s_out), np.sort(s_want), rtol=1e-9, atol=1e-12),
                          "%s fp32 %s: singular values = scalar polynomial of the input's" % (ns, shape))
            # direction: close to the polar factor U V^T of the SVD
            u, _, vt = np.linalg.svd(U, full_matrices=False)
            P = u @ vt
            cos = np.sum(Op * P) / (np.linalg.norm(Op) * np.linalg.norm(P))
            check(cos > 0.99, "polar_express %s %s: cos to the SVD polar factor %.5f > 0.99"
                  % (dt, shape, cos))
            for ns in ("keller", "polar_express"):
                A1 = newton_schulz(U.T, ns, 5, dt)
                A2 = newton_schulz(U, ns, 5, dt).T
                if shape[0] != shape[1]:   # the same operations on the same r <= c orientation
                    check(np.array_equal(A1, A2), "%s %s %s: NS(U^T) == NS(U)^T exactly" % (ns, dt, shape))
                elif dt == "fp32":         # square: X X^T against X^T X, equal up to rounding
                    check(np.allclose(A1, A2, rtol=0, atol=1e-10),
                          "%s %s %s: NS(U^T) == NS(U)^T (1e-10)" % (ns, dt, shape))
            if dt == "bf16":
                check(np.array_equal(bf16_round(Ok), Ok), "keller bf16 %s: output is bf16-valued" % (shape,))
    U = rng.normal(size=(16, 40))
    for ns in ("keller", "polar_express"):
        O32 = newton_schulz(U, ns, 5, "fp32")
        O16 = newton_schulz(U, ns, 5, "bf16")
        rel = np.linalg.norm(O16 - O32) / np.linalg.norm(O32)
        check(rel < 0.03, "%s: bf16 NS within 3%% of fp32 (%.4f)" % (ns, rel))
        Os = newton_schulz(U * 1e-3, ns, 5, "fp32")
        tol = 1e-12 if ns == "keller" else 1e-3    # polar_express: the + 1e-6 is not scale free
        check(np.allclose(Os, O32, rtol=0, atol=tol), "%s fp32: NS(1e-3 U) == NS(U) (%g)" % (ns, tol))
    Z = newton_schulz(np.zeros((4, 6)), "keller", 5, "bf16")
    check(np.all(Z == 0), "keller bf16: NS(0) == 0 (clamped norm, no NaN)")
    Z = newton_schulz(np.zeros((4, 6)), "polar_express", 5, "fp32")
    check(np.all(Z == 0), "polar_express fp32: NS(0) == 0")
    # one hand-computed keller step on a 1x2 vector (singular value 1 after normalisation)
    x = np.array([[3.0, 4.0]])
    o = newton_schulz(x, "keller", 1, "fp32")
    a, b, c = KELLER
    check(np.allclose(o, (a + b + c) * x / 5.0, rtol=1e-14), "keller one step on [3,4]: (a+b+c) x/|x|")

    # --- adjust
    check(abs(adjust_ratio(48, 16, "original") - math.sqrt(3)) < 1e-15, "adjust original 48x16 = sqrt 3")
    check(adjust_ratio(16, 48, "original") == 1.0, "adjust original 16x48 = 1")
    check(abs(adjust_ratio(16, 48, "match_rms_adamw") - 0.2 * math.sqrt(48)) < 1e-15,
          "adjust match_rms_adamw 16x48 = 0.2 sqrt 48")

    # --- NorMuon
    O = newton_schulz(rng.normal(size=(12, 20)) * np.linspace(0.1, 3, 12)[:, None], "keller", 5, "fp32")
    O2, V = normuon_normalize(O, np.zeros((12, 1)), 0.95)
    check(abs(np.linalg.norm(O2) - np.linalg.norm(O)) < 1e-9 * np.linalg.norm(O),
          "normuon keeps the Frobenius norm")
    check(np.allclose(V, 0.05 * np.mean(O * O, axis=1, keepdims=True), rtol=1e-15, atol=0),
          "normuon V after one step = (1-beta2) row mean of O^2")
    rms = np.sqrt(np.mean(O2 * O2, axis=1))
    check(np.ptp(rms) < 1e-9 * rms.mean(), "normuon step 1: every row has the same RMS")
    check(np.all(np.sign(O2) == np.sign(O)), "normuon keeps signs")

    # --- AdamW
    cfg = parse_config(example_config("adamw", K=1))
    w0 = {n: rng.normal(0, 0.1, EXAMPLE_SHAPES[n]) for n in cfg["roles"]}
    g1 = {n: rng.normal(0, 0.01, EXAMPLE_SHAPES[n]) for n in cfg["roles"]}
    out = run(cfg, w0, [g1])
    ok = True
    for n, role in cfg["roles"].items():
        rate = cfg["lr"] * cfg["lr_mult"][role] * cfg["f"][0]
        dec = cfg["weight_decay"] if role in DECAY_ROLES else 0.0
        step = w0[n] * (1 - rate * dec) - out["w." + n]
        ok &= np.allclose(step, rate * g1[n] / (np.abs(g1[n]) + cfg["eps"]), rtol=1e-9, atol=1e-18)
        big = np.abs(g1[n]) > 1e-4
        ok &= np.allclose(step[big], rate * np.sign(g1[n][big]), rtol=1e-4, atol=0)
    check(ok, "adamw step 1: every element moves by lr*mult*f*g/(|g|+eps) ~ sign(g) after decay "
          "(decay on matrix/embedding/head only)")
    g2 = {n: rng.normal(0, 0.01, EXAMPLE_SHAPES[n]) for n in cfg["roles"]}
    cfg2 = parse_config(dict(example_config("adamw", K=2), weight_decay=0.0))
    out2 = run(cfg2, w0, [g1, g2])
    n = "blocks.0.ffn.fc1.bias"
    b1, b2 = cfg2["betas"]
    mm = (1 - b1) * b1 * g1[n] + (1 - b1) * g2[n]
    vv = (1 - b2) * b2 * g1[n] ** 2 + (1 - b2) * g2[n] ** 2
    r1 = cfg2["lr"] * cfg2["f"][0]
    r2 = cfg2["lr"] * cfg2["f"][1]
    w1 = w0[n] - r1 * g1[n] / (np.abs(g1[n]) + 1e-8)
    w2 = w1 - (r2 / (1 - b1 ** 2)) * mm / (np.sqrt(vv) / math.sqrt(1 - b2 ** 2) + 1e-8)
    check(np.allclose(out2["w." + n], w2, rtol=1e-13, atol=1e-16) and np.allclose(out2["m." + n], mm)
          and np.allclose(out2["v." + n], vv), "adamw two steps by hand (bias correction, eps placement)")

    # --- Muon
    W = rng.normal(0, 0.1, (8, 24))
    G1 = rng.normal(0, 0.01, (8, 24))
    G2 = rng.normal(0, 0.01, (8, 24))
    mc = dict(MUON_DEFAULTS, ns_dtype="fp32", nesterov=False)
    Wa, Ma, _, _ = muon_update(W, G1, np.zeros_like(W), None, 1.0, mc, 0.0, False)
    Wb, Mb, _, _ = muon_update(Wa, G2, Ma, None, 1.0, mc, 0.0, False)
    Mexp = 0.95 * 0.05 * G1 + 0.05 * G2
    check(np.allclose(Mb, Mexp, rtol=1e-15), "muon momentum M = mu M + (1-mu) G")
    check(np.allclose(Wb, Wa - 0.02 * newton_schulz(Mexp, "keller", 5, "fp32"), rtol=0, atol=1e-15),
          "muon nesterov false: O = NS(M)")
    mc_n = dict(mc, nesterov=True)
    Wa2, Ma2, _, _ = muon_update(W, G1, np.zeros_like(W), None, 1.0, mc_n, 0.0, False)
    Wb2, _, _, _ = muon_update(Wa2, G2, Ma2, None, 1.0, mc_n, 0.0, False)
    Un = 0.05 * G2 + 0.95 * Mexp
    check(np.allclose(Wb2, Wa2 - 0.02 * newton_schulz(Un, "keller", 5, "fp32"), rtol=0, atol=1e-15),
          "muon nesterov true: O = NS((1-mu) G + mu M)")
    Wt, _, _, O = muon_update(W.T.copy(), G1.T.copy(), np.zeros((24, 8)), None, 0.5, mc, 0.0, False)
    check(np.allclose(W.T - Wt, 0.5 * 0.02 * math.sqrt(3) * O, rtol=1e-12, atol=1e-16),
          "muon 24x8: step = eta sqrt(3) O (adjust original)")
    # cautious decay: W aligned with O -> all decayed (== plain); W = -O -> no decay
    O0 = newton_schulz(G1, "keller", 5, "fp32")
    mcw = dict(mc, cautious_wd=True)
    Wal = np.abs(W) * np.sign(O0)
    A1, _, _, _ = muon_update(Wal, G1, np.zeros_like(W), None, 1.0, mcw, 0.1, False)
    A2, _, _, _ = muon_update(Wal, G1, np.zeros_like(W), None, 1.0, mc, 0.1, False)
    check(np.array_equal(A1, A2), "cautious mask all true when W has O's signs (== plain decay)")
    Wop = -np.abs(W) * np.sign(O0)
    A3, _, _, O3 = muon_update(Wop, G1, np.zeros_like(W), None, 1.0, mcw, 0.1, False)
    check(np.allclose(A3, Wop - 0.02 * O3, rtol=0, atol=1e-16), "cautious mask all false when W = -sign(O)")
    A4, _, _, O4 = muon_update(W, G1, np.zeros_like(W), None, 1.0, mc, 0.1, False)
    check(np.allclose(A4, W - 0.02 * O4 - 0.02 * 0.1 * W, rtol=0, atol=1e-16),
          "muon decay eta*lambda*W, un-adjusted eta")

    # --- end to end through files and the command line
    tmp = tempfile.mkdtemp(prefix="refoptim_")
    me = os.path.abspath(__file__)
    for typ, ns, dt, dtype in (("adamw", "keller", "fp32", "F32"), ("muon", "keller", "bf16", "F32"),
                               ("muon", "polar_express", "fp32", "F64"),
                               ("normuon", "polar_express", "bf16", "F64"),
                               ("normuon", "keller", "fp32", "F32")):
        cfg_raw = example_config(typ, ns, dt, K=3, cautious_wd=(typ == "normuon"),
                                 adjust_lr=("match_rms_adamw" if ns == "polar_express" else "original"))
        inp = os.path.join(tmp, "in_%s_%s_%s.safetensors" % (typ, ns, dt))
        outp = inp.replace("in_", "out_")
        write_example(inp, cfg_raw, seed=7, dtype=dtype)
        res = subprocess.run([sys.executable, me, "step", "--in", inp, "--out", outp],
                             capture_output=True, text=True)
        if res.returncode != 0:
            check(False, "step %s/%s/%s exits 0: %s" % (typ, ns, dt, res.stderr.strip()))
            continue
        got, meta = read_safetensors(outp)
        tensors, _ = read_safetensors(inp)
        c = parse_config(cfg_raw)
        w0, grads = split_input(tensors, c)
        want = run(c, w0, grads)
        names = set(c["roles"])
        expect_keys = {"w." + n for n in names}
        for n in names:
            if typ != "adamw" and c["roles"][n] == "matrix":
                expect_keys.add("muon_momentum." + n)
                if typ == "normuon":
                    expect_keys.add("normuon_v." + n)
            else:
                expect_keys |= {"m." + n, "v." + n}
        same = set(got) == expect_keys and all(np.array_equal(got[k], want[k]) for k in got)
        check(same, "step %s/%s/%s (%s input): OUT has the expected tensors, equal to in-process"
              % (typ, ns, dt, dtype))
        moved = all(not np.array_equal(got["w." + n], w0[n]) for n in names)
        check(moved and json.loads(meta["config"]) == cfg_raw, "step %s/%s/%s: every parameter moved, "
              "config echoed" % (typ, ns, dt))
        if typ == "normuon":
            nv = got["normuon_v.blocks.0.ffn.fc1.weight"]
            check(nv.shape == (24, 1) and np.all(nv > 0), "normuon_v has shape [A, 1], positive")
    # bad inputs are errors (exit 2)
    bad = example_config("muon", "polar_express", "fp32", K=1, ns_steps=4)
    inp = os.path.join(tmp, "bad.safetensors")
    write_example(inp, bad)
    res = subprocess.run([sys.executable, me, "step", "--in", inp, "--out", inp + ".out"],
                         capture_output=True, text=True)
    check(res.returncode == 2 and "polar_express" in res.stderr, "polar_express ns_steps 4 is an error")
    t = example_tensors(example_config("muon", K=2))
    del t["g2.blocks.0.ffn.fc1.bias"]
    write_safetensors(inp, t, {"config": json.dumps(example_config("muon", K=2))})
    res = subprocess.run([sys.executable, me, "step", "--in", inp, "--out", inp + ".out"],
                         capture_output=True, text=True)
    check(res.returncode == 2 and "g2.blocks.0.ffn.fc1.bias" in res.stderr, "a missing gradient is an error")
    for fn in os.listdir(tmp):
        os.remove(os.path.join(tmp, fn))
    os.rmdir(tmp)

    print("%d checks, %d failed" % (count[0], len(failures)))
    return 1 if failures else 0


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------

def main(argv):
    if argv and argv[0] == "--self-test":
        return selftest()
    ap = argparse.ArgumentParser(description="NormLab optimizer reference (float64 numpy)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step", help="apply K updates: IN.safetensors -> OUT.safetensors")
    s.add_argument("--in", dest="inp", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--out-dtype", default="F64", choices=("F64", "F32"),
                   help="dtype of OUT's tensors (F32 for readers of NormLab's checkpoint format)")
    e = sub.add_parser("example", help="write a small synthetic IN.safetensors")
    e.add_argument("--out", required=True)
    e.add_argument("--type", default="muon", choices=TYPES)
    e.add_argument("--ns", default="keller", choices=("keller", "polar_express"))
    e.add_argument("--ns-dtype", default="fp32", choices=("fp32", "bf16"))
    e.add_argument("--K", type=int, default=3)
    e.add_argument("--seed", type=int, default=0)
    sub.add_parser("selftest", help="internal consistency checks")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "selftest":
            return selftest()
        if args.cmd == "example":
            write_example(args.out, example_config(args.type, args.ns, args.ns_dtype, K=args.K),
                          seed=args.seed)
            return 0
        step_files(args.inp, args.out, args.out_dtype)
        return 0
    except (ContractError, OSError) as e:
        print("reference_optim.py: error: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
