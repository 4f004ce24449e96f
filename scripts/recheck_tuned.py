#!/usr/bin/env python3
"""Recompute a tuned study's confirm statistics from its shipped results file.

A tuned sweep's results file (configs/sweeps/results/*.md, written by `normlab report`) holds the
comparison table (each arm's selected value, confirm mean, Δ against the baseline, its interval, p,
verdict) and the Runs table (every run's best val to 4 decimals). This script recomputes, from the
Runs table alone and with its own t distribution (not NormLab's C++), each arm's Δ, 95 % interval
and p, and what reports written before those columns existed do not print: Holm's adjusted p over
the arms (`p_adj`) and the smallest effect the test detects with 80 % power (`mde` =
(t_{0.975,df} + t_{0.80,df}) se, src/metrics/README.md). Welch's test (Welch-Satterthwaite df) or
the paired test over shared seeds, as the file's description says (or --test). With `tune.fit:
quadratic`, each cell's fitted optimum (the parabola through the confirm seeds' means at the
bracket's three values against log2 of the value, its minimum over the bracket) and each arm's slope
of log2 (fitted optimum) over the ladder's rungs and log2 largest / smallest (point estimates; the
report's bootstrap intervals are random resamples and are not recomputed).

    scripts/recheck_tuned.py configs/sweeps/results/tuned_norms.md          # the table
    scripts/recheck_tuned.py --check configs/sweeps/results/tuned_norms.md  # and hold the file to it
    scripts/recheck_tuned.py --across A.md B.md C.md@16                     # one ladder, several sweeps

--across prints the larger-is-better table of a ladder whose rungs ran as separate sweeps (a
single-rung sweep's file named FILE@VALUE): every rung pair of each arm, paired over the seeds they
share, Holm over the arm's pairs, the report's verdict rule with the files' margin.

--check exits 1 when a printed Δ, interval end, p, p_adj or mde is not what the runs give, within
what rounding the runs' values to 4 decimals allows (0.0005 nats on Δ, 0.001 + 3 % on interval
ends and mde; p within 15 % or 0.002, below 0.001 within a factor 3, and on the printed side of 0.05; each plus half a unit of the last digit printed; where the
printed interval is narrower than 0.001, below what 4 decimals resolve, only Δ and its ends). Ladder
sweeps: one table per rung, Holm over each rung's arms, and the "larger is better" table (each arm's
rung against the smaller one, paired, Holm over the arm's pairs), as `normlab report` computes them.
"""
import argparse
import math
import os
import re
import sys


# ---- Student's t, independently of src/metrics/stats.cpp ------------------------------------------

def _betacf(a, b, x):
    """Continued fraction of the regularised incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def t_cdf(t, df):
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p, df):
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def mean_sd(v):
    m = sum(v) / len(v)
    return m, math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def welch(a, b):
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if se > 0 else float("nan")
    return ma - mb, se, df


def paired(a, b):
    d = [x - y for x, y in zip(a, b)]
    m, s = mean_sd(d)
    return m, s / math.sqrt(len(d)), len(d) - 1.0


def decided(delta, se, df):
    """Δ, its 95 % interval, two-sided p and the mde of a t test with this se and df."""
    if se > 0:
        half = t_quantile(0.975, df) * se
        t = abs(delta) / se
        p = betainc(df / 2.0, 0.5, df / (df + t * t))  # two-sided, from the tail (no 1 - cdf cancellation)
        mde = (t_quantile(0.975, df) + t_quantile(0.80, df)) * se
    else:
        half, p, mde = 0.0, (0.0 if delta != 0 else 1.0), 0.0
    return {"delta": delta, "lo": delta - half, "hi": delta + half, "p": p, "mde": mde, "se": se, "df": df}


def holm(ps):
    order = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    out, run = [None] * len(ps), 0.0
    for j, (p, i) in enumerate(order):
        run = max(run, min(1.0, p * (len(order) - j)))
        out[i] = run
    return out


# ---- the results file -------------------------------------------------------------------------------

def table(lines, start):
    """The Markdown table whose header is lines[start]: (header cells, rows of cells)."""
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    header, rows = cells(lines[start]), []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return header, rows


def number(cell):
    m = re.match(r"^([+-]?[0-9.]+(?:e[+-]?[0-9]+)?)", cell)
    return float(m.group(1)) if m else None


def interval(cell):
    m = re.match(r"^([+-]?[0-9.]+) \[([+-]?[0-9.]+), ([+-]?[0-9.]+)\]", cell)
    return tuple(m.groups()) if m else None


def unit(text):
    """Half a unit in the last printed decimal of a number written as text (0 for none)."""
    m = re.match(r"^[+-]?[0-9]*\.([0-9]+)$", text)
    return 0.5 * 10.0 ** -len(m.group(1)) if m else 0.0


class Results:
    """A tuned sweep's results file, parsed: its confirm seeds, test, Runs table and comparison
    tables (one, or one per ladder rung, each under "### KEY = VALUE")."""

    def __init__(self, path, test=None):
        self.path = path
        lines = self.lines = open(path).read().splitlines()
        tuned_at = next((i for i, l in enumerate(lines) if l.startswith("| arm | selected ")), None)
        if tuned_at is None:
            sys.exit(f"{path}: no comparison table ('| arm | selected ...'): not a tuned sweep's results file")
        text = "\n".join(lines[:tuned_at])
        seeds = re.search(r"with the fresh seeds \[([0-9, ]+)\]", text)
        if not seeds:
            sys.exit(f"{path}: no 'with the fresh seeds [...]' in the comparison's description")
        self.confirm = [s.strip() for s in seeds.group(1).split(",")]
        self.test = test or ("paired" if re.search(r"\bpaired\b", text) else "welch")
        margin = re.search(r"inside ±([0-9.]+)", text)
        self.margin = float(margin.group(1)) if margin else None
        self.runs_at = next(i for i, l in enumerate(lines) if l.startswith("|") and "| seed |" in l and "| best val |" in l)
        rhead, self.runs = table(lines, self.runs_at)
        self.si, self.bi, self.sti = rhead.index("seed"), rhead.index("best val"), rhead.index("status")
        self.key_cols = rhead[:self.si - 1]  # the sweep's keys (last name component), then the tuned key, then seed
        self.groups, rung = [], None
        section = max(i for i, l in enumerate(lines[:tuned_at]) if l.startswith("## "))
        for i in range(section, self.runs_at):
            m = re.match(r"^### (\S+) = (\S+)$", lines[i])
            if m:
                rung = (m.group(1).split(".")[-1], m.group(2))
            elif lines[i].startswith("| arm | selected ") and i >= tuned_at:
                self.groups.append((rung, table(lines, i)))
                if rung is None:
                    break
        if not self.groups:
            sys.exit(f"{path}: no comparison table")

    def values(self, arm, selected, rung):
        """{confirm seed: best val} of the arm's finished runs at the selected value (and rung)."""
        labels = {} if arm == "(all)" else dict(kv.split("=", 1) for kv in arm.split(","))
        cols = {k: j for j, k in enumerate(self.key_cols)}
        if any(k not in cols for k in labels) or (rung and rung[0] not in cols):
            sys.exit(f"{self.path}: arm {arm}: a key missing from the Runs table's columns {self.key_cols}")
        si, by_seed = self.si, {}
        for r in self.runs:
            if r[si - 1] != selected or r[si] not in self.confirm or r[self.sti] != "done":
                continue
            if rung and r[cols[rung[0]]] != rung[1]:
                continue
            if all(r[cols[k]] == v for k, v in labels.items()):
                v = number(r[self.bi])
                if v is not None and math.isfinite(v):
                    by_seed[r[si]] = v
        return by_seed


def larger_minus_smaller(x, y):
    """The paired test of one arm's confirm runs at a larger rung (y) against a smaller (x), over
    their shared seeds: n, and Δ = larger - smaller with its interval, p and mde where n >= 2."""
    shared = sorted(set(x) & set(y))
    if len(shared) < 2:
        return {"n": len(shared)}
    return {"n": len(shared), **decided(*paired([y[k] for k in shared], [x[k] for k in shared]))}


def holm_per_arm(rows):
    """Holm's p_adj over each arm's rung pairs (the rows sharing a "group")."""
    for arm in {r["group"] for r in rows if "p" in r}:
        mine = [r for r in rows if r["group"] == arm and "p" in r]
        for r, pa in zip(mine, holm([r["p"] for r in mine])):
            r["p_adj"] = pa


def recompute(path, test):
    """Per comparison table (one, or one per ladder rung): (rung label, the table's columns, rows)."""
    res = Results(path, test)
    test, confirm, groups, lines, values = res.test, res.confirm, res.groups, res.lines, res.values

    out = []
    for rung, (head, arms) in groups:
        col = {name: head.index(name) for name in head}
        base = next(a for a in arms if a[-1] == "baseline")
        b = values(base[0], base[1].split()[0], rung)
        if len(b) < 2:
            sys.exit(f"{path}: the baseline {base[0]} has {len(b)} confirm runs in the Runs table")
        rows = []
        for a in arms:
            if a is base:
                continue
            v = values(a[0], a[1].split()[0], rung)
            if len(v) < 2:
                rows.append({"arm": a[0], "n": len(v), "printed": a})
                continue
            if test == "paired":
                shared = sorted(set(v) & set(b))
                if len(shared) < 2:
                    rows.append({"arm": a[0], "n": len(shared), "printed": a})
                    continue
                t = paired([v[s] for s in shared], [b[s] for s in shared])
            else:
                shared = v
                t = welch(list(v.values()), list(b.values()))
            rows.append({"arm": a[0], "n": len(shared), "printed": a, **decided(*t)})
        for r, pa in zip(rows, holm([r.get("p") for r in rows])):
            r["p_adj"] = pa
        out.append(("" if rung is None else f"{rung[0]} = {rung[1]}", col, rows))

    # A ladder's "Larger is better on the confirm seeds?" table: each arm's confirm runs at a rung
    # against its runs at the smaller rung, each at the value the arm ran at there, paired over the
    # confirm seeds (larger - smaller), Holm over the arm's pairs.
    larger_at = next((i for i, l in enumerate(lines) if l.startswith("| arm | smaller -> larger |")), None)
    if larger_at is not None and groups[0][0] is not None:
        ran_at = {(rung[1], a[0]): a[1].split()[0] for rung, (_, arms) in groups for a in arms}
        key = groups[0][0][0]
        head, pairs = table(lines, larger_at)
        col = {name: head.index(name) for name in head}
        rows = []
        for a in pairs:
            small, large = [x.strip() for x in a[1].split("->")]
            if (small, a[0]) not in ran_at or (large, a[0]) not in ran_at:
                sys.exit(f"{path}: larger-is-better row {a[0]} {a[1]}: a rung without a comparison table")
            x = values(a[0], ran_at[(small, a[0])], (key, small))
            y = values(a[0], ran_at[(large, a[0])], (key, large))
            rows.append({"arm": f"{a[0]} {a[1]}", "group": a[0], "printed": a, **larger_minus_smaller(x, y)})
        holm_per_arm(rows)
        out.append(("larger is better (paired over the confirm seeds, Holm over each arm's pairs)", col, rows))
    return test, confirm, out


def fits(path, confirm):
    """A tune.fit quadratic sweep's fitted optima, recomputed: per cell, the parabola through the
    confirm seeds' mean best val at the bracket's three values against log2 of the value, its
    minimum over the bracket; then each arm's least-squares slope of log2 (fitted) against log2 of
    the ladder's rung and log2 largest / smallest. Returns [(what, got, printed text)]."""
    lines = open(path).read().splitlines()
    at = next((i for i, l in enumerate(lines) if l.startswith("| cell | selected |")), None)
    if at is None:
        return [], 0
    grid = re.search(r"at (?:each searched rung at )?\S+ = \[([^\]]+)\] with seeds", "\n".join(lines[:at]))
    if not grid:
        sys.exit(f"{path}: no search grid ('at KEY = [...] with seeds') before the fitted optima")
    grid = [float(x) for x in grid.group(1).split(",")]
    runs_at = next(i for i, l in enumerate(lines) if l.startswith("|") and "| seed |" in l and "| best val |" in l)
    rhead, runs = table(lines, runs_at)
    si, bi, sti = rhead.index("seed"), rhead.index("best val"), rhead.index("status")
    head, cells = table(lines, at)
    fc, bc = head.index("fitted [95 % interval]"), (head.index("bracket") if "bracket" in head else None)
    out, skipped, fitted = [], 0, {}
    for c in cells:
        printed = number(c[fc])
        if printed is None:
            continue
        labels = dict(kv.split("=", 1) for kv in c[0].split(","))
        if bc is not None:
            lo, hi = (float(x) for x in c[bc].split(".."))
            values = [v for v in grid if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
        else:
            k = min(range(len(grid)), key=lambda j: abs(grid[j] - float(c[1])))
            values = grid[k - 1:k + 2]
        means = []
        for v in values:
            seeds = [float(r[bi]) for r in runs
                     if r[sti] == "done" and r[si] in confirm and number(r[si - 1]) is not None
                     and abs(number(r[si - 1]) - v) <= 1e-9 * v and r[bi] != "-"
                     and all(r[rhead.index(key)] == val for key, val in labels.items())]
            means.append(sum(seeds) / len(seeds) if len(seeds) == len(confirm) else None)
        if len(values) != 3 or None in means:
            skipped += 1  # a failed run (counted as l0 by the report) or a bracket this script does not read
            continue
        x = [math.log2(v) for v in values]
        # The parabola through the three points (Newton's divided differences), minimum over [x0, x2].
        d1 = (means[1] - means[0]) / (x[1] - x[0])
        a = ((means[2] - means[1]) / (x[2] - x[1]) - d1) / (x[2] - x[0])
        b = d1 - a * (x[0] + x[1])
        f = lambda t: means[0] + d1 * (t - x[0]) + a * (t - x[0]) * (t - x[1])
        candidates = [x[0], x[2]] + ([-b / (2 * a)] if a > 0 and x[0] < -b / (2 * a) < x[2] else [])
        best = 2 ** min(candidates, key=f)
        fitted[c[0]] = (labels, best)
        out.append((f"fitted {c[0]}", best, c[fc].split()[0]))
    # The slopes: each arm's cells over the ladder's rungs. The arm is a cell's labels less the rung
    # and the keys that follow the rung (one value per rung, zipped with it: d_ff with d_model).
    text = "\n".join(lines[at:])
    ladder = re.search(r"^Ladder: (\S+) =", "\n".join(lines), re.M)
    if fitted and ladder:
        rung_key = ladder.group(1).split(".")[-1]
        cells_ = list(fitted.values())
        by_rung = {}
        for labels, _ in cells_:
            by_rung.setdefault(labels[rung_key], []).append(labels)
        follow = {k for k in cells_[0][0] if k != rung_key and all(len({l[k] for l in ls}) == 1 for ls in by_rung.values())
                  and len({l[k] for l, _ in cells_}) > 1}
        arms = {}
        for labels, best in cells_:
            arm = ",".join(f"{k}={v}" for k, v in labels.items() if k != rung_key and k not in follow)
            arms.setdefault(arm, []).append((float(labels[rung_key]), best))
    else:
        arms = {}
    for arm, pts in arms.items():
        if len(pts) < 2:
            continue
        pts.sort()
        xs, ys = [math.log2(p[0]) for p in pts], [math.log2(p[1]) for p in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((u - mx) * (w - my) for u, w in zip(xs, ys)) / sum((u - mx) ** 2 for u in xs)
        name = arm or "(all)"
        m = re.search(r"(?:: |; )" + re.escape(arm) + r" ([+-][0-9.]+) \(\d+ rungs\)", text) if arm else None
        if m:  # the older reports' one line of slopes
            out.append((f"slope {name}", slope, m.group(1)))
        row = re.search(r"^\| " + re.escape(name) + r" \| [^|]+ \| ([+-][0-9.]+) \[[^|]*\| ([+-][0-9.]+) \[", text, re.M)
        if row:  # the table: slope, log2 largest / smallest
            out.append((f"slope {name}", slope, row.group(1)))
            out.append((f"log2 largest / smallest {name}", ys[-1] - ys[0], row.group(2)))
    return out, skipped


def across(paths):
    """--across: the larger-is-better table of a ladder whose rungs ran as separate sweeps, from
    their results files (a single-rung sweep's named by FILE@VALUE): each arm's confirm runs at
    every rung against its runs at every smaller rung (each at the value the arm ran at there),
    paired over the seeds both share, Holm over the arm's pairs; the verdict as the report's
    (margin: the files' own). A rung in a later file replaces the same arm's rung in an earlier one.
    Prints the table and returns 0; exits with a message on bad input."""
    cells, key, margins, nothing = {}, None, set(), set()
    for spec in paths:
        path, _, given = spec.rpartition("@") if "@" in os.path.basename(spec) else (spec, "", "")
        res = Results(path)
        if res.test != "paired":
            sys.exit(f"{path}: a {res.test} study: --across pairs seeds and needs paired confirm seeds")
        margins.add(res.margin)
        for rung, (head, arms) in res.groups:
            if (rung is None) == (not given):
                sys.exit(f"{path}: " + ("no '### KEY = VALUE' rung heading above its comparison table: name "
                                        "its rung as FILE@VALUE" if rung is None else "a ladder: no @VALUE"))
            if rung is not None and key not in (None, rung[0]):
                sys.exit(f"{path}: its rungs are {rung[0]}, an earlier file's {key}")
            key = rung[0] if rung is not None else key
            at = rung[1] if rung is not None else given
            for a in arms:
                cells.setdefault(a[0], {})[at] = res.values(a[0], a[1].split()[0], rung)
                if "learned nothing" in a[-1]:
                    nothing.add((a[0], at))
                else:
                    nothing.discard((a[0], at))
    if key is None:
        sys.exit("--across: no ladder among the files to name the rungs' key")
    margin = margins.pop() if len(margins) == 1 else None
    rows = []
    for arm, at in cells.items():  # each arm's pairs as the report orders them: by the larger rung
        rungs = sorted(at, key=float)
        for j, large in enumerate(rungs):
            for small in rungs[:j]:
                rows.append({"arm": arm, "group": arm, "pair": f"{small} -> {large}",
                             "nothing": (arm, small) in nothing and (arm, large) in nothing,
                             **larger_minus_smaller(at[small], at[large])})
    holm_per_arm(rows)
    print(f"{key} across {', '.join(paths)}: each arm's larger rung - its smaller, paired over the confirm "
          f"seeds both share, Holm over the arm's pairs; equivalent when the 90 % interval lies inside "
          + (f"±{margin:g}" if margin is not None else "the margin (none: the files give none or differ)")
          + ". The files' runs must come from one kind of machine: a results file does not say which.\n")
    print("| arm | smaller -> larger | n | Δ [95 % interval] | p | p_adj | mde | verdict |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if "p" not in r:
            print(f"| {r['arm']} | {r['pair']} | {r['n']} | - | - | - | - | too few shared seeds |")
            continue
        if r["lo"] > 0 and r["p_adj"] < 0.05:
            verdict = "worse"
        elif r["hi"] < 0 and r["p_adj"] < 0.05:
            verdict = "better"
        elif margin is not None and abs(r["delta"]) + t_quantile(0.95, r["df"]) * r["se"] < margin:  # 90 % inside
            verdict = "equivalent"
        else:
            verdict = "inconclusive"
        if r["nothing"]:
            verdict += " (learned nothing at either size)"
        print(f"| {r['arm']} | {r['pair']} | {r['n']} | {r['delta']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] | "
              f"{r['p']:.2g} | {r['p_adj']:.2g} | {r['mde']:.4f} | {verdict} |")
    return 0


def close(got, printed, abs_tol, rel_tol=0.0):
    return abs(got - printed) <= abs_tol + rel_tol * abs(printed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("results", nargs="+", help="a tuned sweep's results file (configs/sweeps/results/NAME.md); "
                    "with --across, two or more ladder results files")
    ap.add_argument("--test", choices=["welch", "paired"], help="default: as the file's description says")
    ap.add_argument("--check", action="store_true", help="exit 1 where a printed number differs from the runs'")
    ap.add_argument("--across", action="store_true",
                    help="the larger-is-better table over the rungs of several ladder results files "
                         "(a ladder run as separate sweeps): every arm's rung pairs, paired, Holm per arm")
    args = ap.parse_args()
    if args.across:
        if len(args.results) < 2 or args.check or args.test:
            ap.error("--across takes two or more results files, and neither --check nor --test")
        return across(args.results)
    if len(args.results) != 1:
        ap.error("one results file (several only with --across)")
    args.results = args.results[0]
    test, confirm, groups = recompute(args.results, args.test)
    print(f"{args.results}: {test} test over confirm seeds {', '.join(confirm)}; Holm over each table's arms")
    bad, checked, unresolved = [], 0, 0
    for rung, col, out in groups:
        print(f"\n{rung}\n" if rung else "")
        print("| arm | n | Δ [95 % interval] | p | p_adj (Holm) | mde |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in out:
            if "p" not in r:
                print(f"| {r['arm']} | {r['n']} | - | - | - | - |")
                if interval(r["printed"][col["Δ [95 % interval]"]]):
                    bad.append(f"{rung + ': ' if rung else ''}{r['arm']}: printed a Δ, but the Runs table has "
                               f"{r['n']} matching confirm runs to recompute it from")
                continue
            print(f"| {r['arm']} | {r['n']} | {r['delta']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] | {r['p']:.3g} | "
                  f"{r['p_adj']:.3g} | {r['mde']:.4f} |")
            row, where = r["printed"], f"{rung + ': ' if rung else ''}{r['arm']}"
            iv = interval(row[col["Δ [95 % interval]"]])
            checks = []
            if iv:  # each number to the digits it was printed with
                checks += [("Δ", r["delta"], float(iv[0]), 5e-4 + unit(iv[0]), 0.0),
                           ("low", r["lo"], float(iv[1]), 1e-3 + unit(iv[1]), 0.03),
                           ("high", r["hi"], float(iv[2]), 1e-3 + unit(iv[2]), 0.03)]
            # An interval narrower than the Runs table's 4 decimals resolve (an arm at the unigram
            # entropy at both sizes: Δ 6e-6) leaves p, p_adj and mde to the report's full values.
            fine = iv and float(iv[2]) - float(iv[1]) < 1e-3
            unresolved += bool(fine)
            for name, abs_tol, rel_tol in () if fine else (("p", 2e-3, 0.15), ("p_adj", 2e-3, 0.15), ("mde", 1e-3, 0.03)):
                if name in col and number(row[col[name]]) is not None:
                    cell = row[col[name]]
                    printed = number(cell)
                    if name != "mde" and printed < 1e-3:  # a small p to within a factor 3 (4-decimal runs)
                        checks.append((f"log10 {name}", math.log10(max(r[name], 1e-300)), math.log10(printed), 0.5, 0))
                    else:
                        checks.append((name, r[name], printed, abs_tol + unit(cell), rel_tol))
                    # the side of 0.05 a verdict turns on, where the printed digits decide it
                    if name != "mde" and abs(printed - 0.05) > unit(cell) and (printed < 0.05) != (r[name] < 0.05):
                        bad.append(f"{where}: {name} printed {cell}, the runs give {r[name]:.4g}: the other side of 0.05")
            checked += len(checks)
            for name, got, printed, abs_tol, rel_tol in checks:
                if not close(got, printed, abs_tol, rel_tol):
                    bad.append(f"{where}: {name} printed {printed:g}, the runs give {got:.6g}")
    fit_checks, skipped = fits(args.results, confirm)
    if fit_checks or skipped:
        print("\nfitted optima (tune.fit quadratic) and their slopes over the ladder")
        for what, got, text in fit_checks:
            print(f"- {what}: {got:.4g} (printed {text})")
            checked += 1
            # the printed digits: 3 significant for an optimum, 2 decimals for a slope or log2 ratio
            tol = 0.006 * abs(float(text)) if what.startswith("fitted") else 0.006 + unit(text)
            if not close(got, float(text), tol):
                bad.append(f"{what}: printed {text}, the runs give {got:.4g}")
        if skipped:
            print(f"- {skipped} cells not recomputed (a failed run in the bracket, counted as l0 by the report)")
    if args.check:
        print()
        for b in bad:
            print("MISMATCH " + b)
        print(f"check: {checked} printed numbers, {len(bad)} mismatches"
              + (f" ({unresolved} intervals narrower than the runs' 4 decimals: p, p_adj, mde not checked)" if unresolved else ""))
        return 1 if bad or checked == 0 else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
