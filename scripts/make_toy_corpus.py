#!/usr/bin/env python3
"""Deterministic generator of NormLab's byte-level toy corpus (standard library only).

Writes <out-dir>/train.txt, <out-dir>/val.txt and <out-dir>/floor.json.

Every line is one "task" and starts with a two-letter tag ("w: ", "c: ", ...), so the task
is decodable from the text. The generator draws every random choice through a `Source`
object that records the probability of the outcome it drew; the entropy floor of a file is
    floor = (sum over all choices of -ln p(choice)) / (number of bytes in the file)
in nats per byte-token. Because the text determines the choice sequence uniquely (checked
by `--self-check`, which re-derives every choice and its probability from the text alone),
this is -ln P(text) / N, the mean cross-entropy of the ideal model that sees the whole
preceding text.

Regenerate the shipped files (defaults reproduce them byte for byte):
    python3 scripts/make_toy_corpus.py
"""

import argparse
import json
import math
import os
import random
import sys
import time
from collections import Counter

# ---------------------------------------------------------------------------------------
# Fixed corpus parameters (changing any of them changes the shipped files).
# ---------------------------------------------------------------------------------------

CHAIN_SEED = 20240611  # seed of the word Markov chain tables; the same for train and val

# Line types with their probability per line. Tags are "<letter>: ".
LINE_TYPES = ["w", "c", "r", "b", "k"]
LINE_PROBS = [0.34, 0.16, 0.12, 0.16, 0.22]

# w: word bigram chain
WORDS = [
    "the", "a", "this", "every", "cat", "dog", "bird", "fish", "tree", "stone", "river",
    "house", "king", "queen", "child", "man", "woman", "ship", "road", "hill", "sees",
    "likes", "finds", "takes", "makes", "holds", "eats", "runs", "sleeps", "sings", "red",
    "big", "old", "small", "green", "quiet", "dark", "near", "under", "over", "with", "and",
    "then", "slowly", "gold", "moon", "sun", "rain",
]
N_START = 8            # number of words a sentence can start with
SUCC_MIN, SUCC_MAX = 4, 8  # successors per word (never the word itself)
END_MIN, END_MAX = 0.08, 0.22  # probability of ending the sentence after a word
MAX_WORDS = 16         # after this many words the sentence end is forced (0 nats)

# c: copy, r: reverse
LETTERS = "abcdefghijklmnopqrstuvwxyz"
COPY_MIN, COPY_MAX = 5, 20
REV_MIN, REV_MAX = 3, 12

# b: brackets
OPENERS = "([{<"
CLOSERS = ")]}>"
P_OPEN = 0.45   # with a non-empty stack and room left: open (then type 1/4) vs close
P_STOP = 0.40   # with an empty stack and room left: stop vs open another group
MAX_DEPTH = 8
MAX_LEN = 48    # bracket string length cap; when reached, closes are forced

# k: key-value recall
KEYS = LETTERS
KV_MIN, KV_MAX = 3, 6
N_VALUES = 100  # two-digit values 00..99


def build_chain():
    """Sparse random bigram chain over WORDS. Outcome index len(WORDS) means END."""
    assert len(set(WORDS)) == len(WORDS)
    assert all(w.isalpha() and w.islower() for w in WORDS)
    rng = random.Random(CHAIN_SEED)
    v = len(WORDS)
    starts = sorted(rng.sample(range(v), N_START))
    sw = [rng.uniform(0.5, 2.0) for _ in starts]
    tot = math.fsum(sw)
    start = (starts, [x / tot for x in sw])
    trans = []
    for _ in range(v):
        k = rng.randint(SUCC_MIN, SUCC_MAX)
        succ = sorted(rng.sample([j for j in range(v) if j != len(trans)], k))
        w = [rng.uniform(0.2, 1.0) for _ in succ]
        p_end = rng.uniform(END_MIN, END_MAX)
        tot = math.fsum(w)
        probs = [(1.0 - p_end) * x / tot for x in w]
        trans.append((succ + [v], probs + [p_end]))
    return start, trans


START, TRANS = build_chain()
WORD_INDEX = {w: i for i, w in enumerate(WORDS)}
END = len(WORDS)


# ---------------------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------------------

class Source:
    """Random source that records (name, outcome, probability) of every choice."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.choices = []

    def uniform(self, name, n):
        i = self.rng.randrange(n)
        self.choices.append((name, i, 1.0 / n))
        return i

    def weighted(self, name, outcomes, probs):
        u = self.rng.random()
        acc = 0.0
        j = len(outcomes) - 1
        for i, p in enumerate(probs):
            acc += p
            if u < acc:
                j = i
                break
        self.choices.append((name, outcomes[j], probs[j]))
        return outcomes[j]

    def bernoulli(self, name, p):
        x = 1 if self.rng.random() < p else 0
        self.choices.append((name, x, p if x else 1.0 - p))
        return x


def gen_w(src):
    words = [src.weighted("w_start", *START)]
    while len(words) < MAX_WORDS:
        nxt = src.weighted("w_next", *TRANS[words[-1]])
        if nxt == END:
            break
        words.append(nxt)
    return " ".join(WORDS[i] for i in words) + "."


def gen_c(src):
    n = COPY_MIN + src.uniform("c_len", COPY_MAX - COPY_MIN + 1)
    s = "".join(LETTERS[src.uniform("c_letter", 26)] for _ in range(n))
    return s + "|" + s


def gen_r(src):
    n = REV_MIN + src.uniform("r_len", REV_MAX - REV_MIN + 1)
    s = "".join(LETTERS[src.uniform("r_letter", 26)] for _ in range(n))
    return s + "|" + s[::-1]


def gen_b(src):
    out = []
    stack = []
    t = src.uniform("b_type", 4)  # the first group is always opened
    out.append(OPENERS[t])
    stack.append(t)
    while True:
        if not stack:
            if len(out) + 2 > MAX_LEN:
                break  # forced stop
            if src.bernoulli("b_stop", P_STOP):
                break
            t = src.uniform("b_type", 4)
            out.append(OPENERS[t])
            stack.append(t)
        else:
            can_open = len(stack) < MAX_DEPTH and len(out) + len(stack) + 2 <= MAX_LEN
            if can_open and src.bernoulli("b_open", P_OPEN):
                t = src.uniform("b_type", 4)
                out.append(OPENERS[t])
                stack.append(t)
            else:
                out.append(CLOSERS[stack.pop()])
    return "".join(out)


def gen_k(src):
    n = KV_MIN + src.uniform("k_n", KV_MAX - KV_MIN + 1)
    remaining = list(KEYS)
    keys, vals = [], []
    for _ in range(n):
        keys.append(remaining.pop(src.uniform("k_key", len(remaining))))
        vals.append(src.uniform("k_val", N_VALUES))
    q = src.uniform("k_query", n)
    pairs = " ".join("%s=%02d" % (k, v) for k, v in zip(keys, vals))
    return "%s ; %s?%02d" % (pairs, keys[q], vals[q])


GENERATORS = {"w": gen_w, "c": gen_c, "r": gen_r, "b": gen_b, "k": gen_k}


def generate_lines(seed, target_bytes):
    """Yield (line_with_newline, type, choices) until at least target_bytes were produced."""
    src = Source(seed)
    total = 0
    while total < target_bytes:
        src.choices = []
        typ = src.weighted("type", LINE_TYPES, LINE_PROBS)
        line = typ + ": " + GENERATORS[typ](src) + "\n"
        assert len(line) < 120 and all(ord(ch) < 128 for ch in line)
        total += len(line)
        yield line, typ, src.choices


def nats(choices):
    return math.fsum(-math.log(p) for _, _, p in choices)


# ---------------------------------------------------------------------------------------
# Independent decoder: text -> choice sequence with probabilities (proves decodability)
# ---------------------------------------------------------------------------------------

class DecodeError(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise DecodeError(msg)


def is_letters(s):
    return len(s) > 0 and all(ch in LETTERS for ch in s)


def decode_line(line):
    """Return the choice list [(name, outcome, prob)] that produced `line` (with '\\n')."""
    expect(line.endswith("\n") and "\n" not in line[:-1], "bad line ending")
    body = line[:-1]
    expect(len(body) >= 3 and body[1:3] == ": ", "bad tag")
    typ, rest = body[0], body[3:]
    expect(typ in LINE_TYPES, "unknown tag")
    ch = [("type", typ, LINE_PROBS[LINE_TYPES.index(typ)])]

    if typ == "w":
        expect(rest.endswith(".") and rest.count(".") == 1, "w: no final period")
        toks = rest[:-1].split(" ")
        expect(all(t in WORD_INDEX for t in toks), "w: unknown word")
        idx = [WORD_INDEX[t] for t in toks]
        expect(len(idx) <= MAX_WORDS, "w: too long")
        outs, probs = START
        expect(idx[0] in outs, "w: impossible start")
        ch.append(("w_start", idx[0], probs[outs.index(idx[0])]))
        for prev, cur in zip(idx, idx[1:] + [END]):
            if cur == END and len(idx) == MAX_WORDS:
                break  # forced end: no choice was made
            outs, probs = TRANS[prev]
            expect(cur in outs, "w: impossible transition")
            ch.append(("w_next", cur, probs[outs.index(cur)]))

    elif typ in ("c", "r"):
        lo, hi = (COPY_MIN, COPY_MAX) if typ == "c" else (REV_MIN, REV_MAX)
        expect(rest.count("|") == 1, "missing |")
        a, b = rest.split("|")
        expect(is_letters(a) and lo <= len(a) <= hi, "bad source string")
        expect(b == (a if typ == "c" else a[::-1]), "target mismatch")
        ch.append((typ + "_len", len(a) - lo, 1.0 / (hi - lo + 1)))
        ch.extend((typ + "_letter", LETTERS.index(x), 1.0 / 26) for x in a)

    elif typ == "b":
        expect(0 < len(rest) <= MAX_LEN, "b: bad length")
        stack = []
        pos = 0
        for i, x in enumerate(rest):
            # state before emitting rest[i]; pos == number of chars emitted so far
            expect(x in OPENERS or x in CLOSERS, "b: bad char")
            if i == 0:
                expect(x in OPENERS, "b: must start with opener")
                ch.append(("b_type", OPENERS.index(x), 0.25))
            elif not stack:
                expect(x in OPENERS, "b: close on empty stack")
                expect(pos + 2 <= MAX_LEN, "b: open past the cap")
                ch.append(("b_stop", 0, 1.0 - P_STOP))
                ch.append(("b_type", OPENERS.index(x), 0.25))
            else:
                can_open = len(stack) < MAX_DEPTH and pos + len(stack) + 2 <= MAX_LEN
                if x in OPENERS:
                    expect(can_open, "b: open not allowed")
                    ch.append(("b_open", 1, P_OPEN))
                    ch.append(("b_type", OPENERS.index(x), 0.25))
                else:
                    expect(CLOSERS.index(x) == stack[-1], "b: wrong closer")
                    if can_open:
                        ch.append(("b_open", 0, 1.0 - P_OPEN))
            if x in OPENERS:
                stack.append(OPENERS.index(x))
            else:
                stack.pop()
            pos += 1
        expect(not stack, "b: unbalanced")
        if pos + 2 <= MAX_LEN:
            ch.append(("b_stop", 1, P_STOP))

    elif typ == "k":
        expect(rest.count(" ; ") == 1, "k: missing ;")
        left, right = rest.split(" ; ")
        pairs = left.split(" ")
        n = len(pairs)
        expect(KV_MIN <= n <= KV_MAX, "k: bad count")
        ch.append(("k_n", n - KV_MIN, 1.0 / (KV_MAX - KV_MIN + 1)))
        remaining = list(KEYS)
        table = {}
        for pr in pairs:
            expect(len(pr) == 4 and pr[1] == "=" and pr[2:].isdigit(), "k: bad pair")
            key, val = pr[0], int(pr[2:])
            expect(key in remaining, "k: repeated or bad key")
            ch.append(("k_key", remaining.index(key), 1.0 / len(remaining)))
            remaining.remove(key)
            ch.append(("k_val", val, 1.0 / N_VALUES))
            table[key] = pr[2:]
        expect(len(right) == 4 and right[1] == "?", "k: bad query")
        qk = right[0]
        expect(qk in table and right[2:] == table[qk], "k: bad answer")
        ch.append(("k_query", list(table).index(qk), 1.0 / n))
    return typ, ch


# ---------------------------------------------------------------------------------------
# Statistics and driver
# ---------------------------------------------------------------------------------------

def entropy(counter):
    n = sum(counter.values())
    return -math.fsum(c / n * math.log(c / n) for c in counter.values())


def bigram_conditional_entropy(data):
    pairs = Counter(zip(data, data[1:]))
    firsts = Counter(data[:-1])
    n = len(data) - 1
    return -math.fsum(c / n * math.log(c / firsts[a]) for (a, _), c in pairs.items())


def make_split(seed, target_bytes, path):
    lines = []
    task_bytes = Counter()
    task_nats = {t: [] for t in LINE_TYPES}
    task_lines = Counter()
    all_nats = []
    for line, typ, choices in generate_lines(seed, target_bytes):
        lines.append(line)
        c = nats(choices)
        all_nats.append(c)
        task_nats[typ].append(c)
        task_bytes[typ] += len(line)
        task_lines[typ] += 1
    text = "".join(lines)
    data = text.encode("ascii")
    with open(path, "wb") as f:
        f.write(data)
    n = len(data)
    total = math.fsum(all_nats)
    stats = {
        "tokens": n,
        "lines": len(lines),
        "total_nats": round(total, 6),
        "entropy_floor": round(total / n, 8),
        "unigram_entropy": round(entropy(Counter(data)), 8),
        "bigram_entropy_in_sample": round(bigram_conditional_entropy(data), 8),
        "max_line_bytes": max(len(x) for x in lines),
    }
    per_task = {}
    for t in LINE_TYPES:
        tn = math.fsum(task_nats[t])
        per_task[t] = {
            "lines": task_lines[t],
            "bytes": task_bytes[t],
            "byte_share": round(task_bytes[t] / n, 6),
            "nats_per_byte": round(tn / task_bytes[t], 6),
            "nats_share": round(tn / total, 6),
        }
    return stats, per_task


def self_check(seed, target_bytes, path, max_lines):
    """Decode the file on disk line by line and compare with a fresh generator run."""
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("ascii")
    file_lines = text.splitlines(keepends=True)
    gen = generate_lines(seed, target_bytes)
    checked = 0
    nats_gen, nats_dec = [], []
    for fl, (gl, gtyp, gch) in zip(file_lines, gen):
        assert fl == gl, "file differs from regenerated line %d" % checked
        dtyp, dch = decode_line(fl)
        assert dtyp == gtyp
        assert len(dch) == len(gch), (fl, gch, dch)
        for (gn, go, gp), (dn, do, dp) in zip(gch, dch):
            assert gn == dn and go == do and abs(gp - dp) <= 1e-15, (fl, gch, dch)
        a, b = nats(gch), nats(dch)
        assert abs(a - b) <= 1e-9, (fl, a, b)
        nats_gen.append(a)
        nats_dec.append(b)
        checked += 1
        if max_lines and checked >= max_lines:
            break
    if not max_lines or checked == len(file_lines):
        assert checked == len(file_lines)
        assert next(gen, None) is None, "generator produced extra lines"
        fg = math.fsum(nats_gen) / len(data)
        fd = math.fsum(nats_dec) / len(data)
        assert abs(fg - fd) <= 1e-9
    return checked, math.fsum(nats_dec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="data/toy")
    ap.add_argument("--seed-train", type=int, default=1)
    ap.add_argument("--seed-val", type=int, default=2)
    ap.add_argument("--train-bytes", type=int, default=4_000_000)
    ap.add_argument("--val-bytes", type=int, default=200_000)
    ap.add_argument("--self-check", action="store_true",
                    help="after writing, decode the files from their text and verify that "
                         "every choice and its probability match the generator's accounting")
    ap.add_argument("--check-lines", type=int, default=0,
                    help="with --self-check: lines to check per file (0 = all)")
    args = ap.parse_args()

    t0 = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    splits = [("train", args.seed_train, args.train_bytes), ("val", args.seed_val, args.val_bytes)]
    floor = {
        "generator": "scripts/make_toy_corpus.py",
        "command": "python3 scripts/make_toy_corpus.py --out-dir %s --seed-train %d --seed-val %d"
                   " --train-bytes %d --val-bytes %d" % (args.out_dir, args.seed_train,
                                                        args.seed_val, args.train_bytes,
                                                        args.val_bytes),
        "seed_train": args.seed_train,
        "seed_val": args.seed_val,
        "chain_seed": CHAIN_SEED,
        "units": "nats per byte-token",
        "note": "entropy_floor = sum of -ln p over all generator choices / tokens; it assumes "
                "the model sees the full preceding text (windows starting mid-line score "
                "slightly above it). unigram_entropy = entropy of the empirical byte "
                "distribution. bigram_entropy_in_sample = plug-in H(x_t | x_t-1).",
    }
    per_task = {}
    for name, seed, target in splits:
        stats, pt = make_split(seed, target, os.path.join(args.out_dir, name + ".txt"))
        floor[name] = stats
        per_task[name] = pt
    floor["per_task"] = per_task
    with open(os.path.join(args.out_dir, "floor.json"), "w", encoding="ascii") as f:
        json.dump(floor, f, indent=2)
        f.write("\n")

    for name, _, _ in splits:
        s = floor[name]
        print("%-5s tokens=%d lines=%d floor=%.4f unigram=%.4f bigram(in-sample)=%.4f "
              "max_line=%d" % (name, s["tokens"], s["lines"], s["entropy_floor"],
                               s["unigram_entropy"], s["bigram_entropy_in_sample"],
                               s["max_line_bytes"]))
    for t in LINE_TYPES:
        pt = per_task["train"][t]
        print("  %s: byte_share=%.3f nats/byte=%.3f nats_share=%.3f" % (
            t, pt["byte_share"], pt["nats_per_byte"], pt["nats_share"]))

    if args.self_check:
        for name, seed, target in splits:
            path = os.path.join(args.out_dir, name + ".txt")
            n, tot = self_check(seed, target, path, args.check_lines)
            print("self-check %s: %d lines decoded, choices and -ln p match (decoded %.3f nats)"
                  % (name, n, tot))
    print("done in %.1fs" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
