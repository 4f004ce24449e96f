"""Reading NormLab output for scripts/plot.py: no matplotlib, no derived number.

A run directory gives its records (metrics.jsonl: the series drawn over steps and the spike records
marked), its config.yaml (labels only) and `normlab report --json RUN`: every derived number a run
figure shows (entropy floors, the uniform-attention levels, the first/last-block gradient ratio,
final eff_rank, spike score, divergence, losses). A sweep directory gives `normlab report --json
SWEEP` (the summary's rows and the axes' short names), else its summary.csv (the same rows), and
runs/*/point.json. The seed mean and std drawn are the summary's `mean` and `std` rows
(`seed_stats`, src/metrics/records.cpp); nothing here averages, takes a logarithm or reads
floor.json. JSON as NormLab writes it (non-finite numbers as null) and NaN / Infinity literals are
read; a truncated last line of metrics.jsonl (a run still writing) is ignored.
"""

import csv
import json
import math
import os
import subprocess
import sys

SCRIPTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(SCRIPTS_DIR)

# The sweep summary's metric columns (src/sweep/summary.cpp, kSummaryColumnNames), after row, name,
# the axes, seed, n and status.
SUMMARY_COLUMNS = ["steps", "final_train_loss", "best_val_loss", "best_val_excess", "best_val_bpb", "diverged",
                   "spike_count", "spike_score", "max_grad_norm", "grad_ratio_first_last", "final_eff_rank",
                   "tok_per_s", "wall_s"]
# The per-point numbers the sweep figures draw: summary columns, which are also keys of
# `normlab report --json RUN` (a point without a summary row gets them from there).
POINT_NUMBERS = ["final_train_loss", "best_val_loss", "spike_score", "final_eff_rank", "diverged"]


def note(msg):
    print("plot.py: " + msg, file=sys.stderr, flush=True)


def num(x):
    """A JSON/CSV value as a float; None, '', text and booleans become nan."""
    if x is None or isinstance(x, bool):
        return float("nan")
    if isinstance(x, (int, float)):
        return float(x)
    try:
        return float(str(x).strip())
    except ValueError:
        return float("nan")


def finite(x):
    return isinstance(x, float) and math.isfinite(x)


def fmt_num(x):
    return "%g" % x if finite(x) else "n/a"


def vec(x):
    """A JSON list of numbers (nulls allowed) as a list of floats, or None."""
    if not isinstance(x, list) or not x:
        return None
    return [num(v) for v in x]


# ----------------------------------------------------------------------------------------------
# the normlab binary: `normlab report --json` of a run or a sweep
# ----------------------------------------------------------------------------------------------

NORMLAB = {"path": None, "warned": False}


def normlab_binary():
    """--normlab PATH, else $NORMLAB_BINARY, else build/normlab in the repository."""
    return NORMLAB["path"] or os.environ.get("NORMLAB_BINARY") or os.path.join(REPO_ROOT, "build", "normlab")


def normlab_report(path):
    """`normlab report --json PATH` (a run or a sweep directory) as a dict, or {} with a note on
    stderr when the binary is missing or fails (the figures then go without those numbers)."""
    binary = normlab_binary()
    try:
        out = subprocess.run([binary, "report", "--json", path], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, check=False)
    except OSError as e:
        if not NORMLAB["warned"]:
            note("cannot run %s (%s): no derived numbers (floors, spike score, divergence, losses, seed "
                "mean and std); pass --normlab PATH or set NORMLAB_BINARY" % (binary, e))
            NORMLAB["warned"] = True
        return {}
    if out.returncode != 0:
        note("%s report --json %s failed: %s" % (binary, path, out.stderr.strip()[-500:]))
        return {}
    try:
        j = json.loads(out.stdout)
    except ValueError:
        note("%s report --json %s: not JSON" % (binary, path))
        return {}
    return j if isinstance(j, dict) else {}


# ----------------------------------------------------------------------------------------------
# files: metrics.jsonl, config.yaml
# ----------------------------------------------------------------------------------------------

def read_metrics(path):
    """Records of metrics.jsonl by kind; a later record for the same (kind, step) replaces an
    earlier one (a resumed run repeats steps). Unparseable lines are skipped."""
    train, evals, spikes = {}, {}, []
    bad = 0
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except OSError as e:
        note("cannot read %s: %s" % (path, e))
        lines = []
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            r = json.loads(line)  # accepts NaN / Infinity / -Infinity literals too
        except ValueError:
            if i < len(lines) - 2:  # not the (possibly half-written) last line
                bad += 1
            continue
        if not isinstance(r, dict):
            continue
        kind, step = r.get("kind"), r.get("step")
        if not isinstance(step, (int, float)) or isinstance(step, bool):
            continue
        step = int(step)
        if kind == "train":
            train[step] = r
        elif kind == "eval":
            evals[step] = r
        elif kind == "spike":
            spikes.append(r)
    if bad:
        note("%s: skipped %d unreadable line(s)" % (path, bad))
    return ([train[s] for s in sorted(train)], [evals[s] for s in sorted(evals)],
            sorted(spikes, key=lambda r: r.get("step", 0)))


def read_simple_yaml(path):
    """Flattened scalars of a block-style YAML file (what normlab writes as config.yaml):
    {'model.layout': 'pre', 'optim.lr': '0.002', ...}. Uses PyYAML when present. For labels only."""
    out = {}
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return out
    try:
        import yaml  # optional

        def walk(node, prefix):
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, prefix + [str(k)])
            elif not isinstance(node, list):
                out[".".join(prefix)] = "" if node is None else (
                    str(node).lower() if isinstance(node, bool) else str(node))
        walk(yaml.safe_load(text), [])
        return out
    except Exception:
        out.clear()
    stack = []  # (indent, key)
    for raw in text.split("\n"):
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith(("#", "-", "---")):
            continue
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if ":" not in body:
            continue
        key, _, val = body.partition(":")
        key, val = key.strip().strip("'\""), val.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path_keys = [k for _, k in stack] + [key]
        if val == "":
            stack.append((indent, key))
        elif val.startswith("{") and val.endswith("}"):
            for item in val[1:-1].split(","):
                if ":" in item:
                    k, _, v = item.partition(":")
                    out[".".join(path_keys + [k.strip()])] = v.strip().strip("'\"")
        else:
            out[".".join(path_keys)] = val.strip("'\"")
    return out


def read_json(path):
    """A JSON file (an autopsy, a point.json) as a dict; {} when absent or unreadable."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError):
        return {}
    return j if isinstance(j, dict) else {}


# ----------------------------------------------------------------------------------------------
# a run
# ----------------------------------------------------------------------------------------------

class Run:
    """One run directory: its records (metrics.jsonl), config (labels) and `normlab report --json`."""

    def __init__(self, path, label=None):
        self.path = os.path.abspath(path)
        self.label = label or os.path.basename(self.path.rstrip("/"))
        self.train, self.evals, self.spike_records = read_metrics(os.path.join(self.path, "metrics.jsonl"))
        self.cfg = read_simple_yaml(os.path.join(self.path, "config.yaml"))
        self._report = None

    @property
    def report(self):
        """`normlab report --json` of this run (run once, on first use)."""
        if self._report is None:
            self._report = normlab_report(self.path)
        return self._report

    def derived(self, key):
        """A number of `normlab report --json RUN` (src/metrics/README.md#derived-numbers, plus ctx,
        train_entropy_floor, uniform_attn_entropy, uniform_attn_sink), nan when absent or null."""
        return num(self.report.get(key))

    def first_profile_step(self):
        """The step of the first of the report's grad_norm_profiles (the one grad_ratio_first_last
        is of), or None."""
        prof = self.report.get("grad_norm_profiles")
        if isinstance(prof, list) and prof and isinstance(prof[0], dict) and isinstance(prof[0].get("step"), int):
            return prof[0]["step"]
        return None

    def describe(self):
        c = self.cfg
        bits = []
        if c.get("model.layout"):
            bits.append(c["model.layout"] + ("/" + c["model.norm.type"] if c.get("model.norm.type") else ""))
        if c.get("model.n_layers"):
            bits.append("%s blocks" % c["model.n_layers"])
        if c.get("model.d_model"):
            bits.append("d=%s" % c["model.d_model"])
        if c.get("optim.lr"):
            bits.append("lr %s" % c["optim.lr"])
        if c.get("model.qk_norm") in ("true", "True"):
            bits.append("QK-norm")
        if c.get("model.residual.type") not in (None, "add"):
            bits.append("residual " + c["model.residual.type"])
        if c.get("model.value_residual") not in (None, "none"):
            bits.append("value residual " + c["model.value_residual"])
        return ", ".join(bits)

    def series(self, key, records=None):
        """(steps, values) of a scalar train-record key; values nan where absent/non-finite."""
        recs = self.train if records is None else records
        return [r["step"] for r in recs], [num(r.get(key)) for r in recs]

    def eval_series(self, key):
        """(steps, values) of the eval records whose `key` is finite."""
        pairs = [(e["step"], num(e.get(key))) for e in self.evals if finite(num(e.get(key)))]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def layer_matrix(self, key):
        """(steps, rows) of records that carry layers.<key>, rows padded with nan to one width."""
        steps, rows = [], []
        for r in self.train:
            v = vec((r.get("layers") or {}).get(key)) if isinstance(r.get("layers"), dict) else None
            if v is not None:
                steps.append(r["step"])
                rows.append(v)
        if not rows:
            return [], []
        w = max(len(v) for v in rows)
        return steps, [v + [float("nan")] * (w - len(v)) for v in rows]

    def layer_names(self):
        """Every layers.<name> the train records carry, in order of first appearance."""
        names = []
        for r in self.train:
            for k in (r.get("layers") or {}) if isinstance(r.get("layers"), dict) else ():
                if k not in names:
                    names.append(k)
        return names

    def has_key(self, key, records=None):
        """True when some record carries `key` (even as null): the run logs that quantity."""
        return any(key in r for r in (self.train if records is None else records))

    def last_layer_row(self, key):
        """(step, row) of the last train record carrying layers.<key>, or (None, None)."""
        steps, rows = self.layer_matrix(key)
        return (steps[-1], rows[-1]) if steps else (None, None)

    def first_layer_row(self, key):
        """(step, row) of the first train record carrying layers.<key> (step 0 when it is logged)."""
        steps, rows = self.layer_matrix(key)
        return (steps[0], rows[0]) if steps else (None, None)

    def nonfinite_steps(self):
        return [r["step"] for r in self.train
                if r.get("nonfinite") is True or not finite(num(r.get("loss")))]

    def spike_marks(self):
        """{metric: [(step, value, z)]}: the run's spike records, as the detector wrote them."""
        marks = {"loss": {}, "grad_norm": {}}
        for s in self.spike_records:
            m = s.get("metric")
            if m in marks:
                marks[m][int(s["step"])] = (num(s.get("value")), num(s.get("z")))
        return {m: sorted((s, v, z) for s, (v, z) in d.items()) for m, d in marks.items()}

    def last_record_with(self, key):
        """The last train record whose `key` is a non-empty object (depth_weights), or None."""
        recs = [r for r in self.train if isinstance(r.get(key), dict) and r[key]]
        return recs[-1] if recs else None

    def autopsies(self):
        """Paths of spikes/step_<N>.autopsy.json (`normlab replay`), sorted."""
        d = os.path.join(self.path, "spikes")
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith("step_") and n.endswith(".autopsy.json"))
        except OSError:
            return []
        return [os.path.join(d, n) for n in names]


# ----------------------------------------------------------------------------------------------
# a sweep
# ----------------------------------------------------------------------------------------------

def value_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v == int(v) and abs(v) < 1e15:
        return repr(v)
    return str(v)


def sort_key(v):
    f = num(v)
    return (0, f, "") if finite(f) else (1, 0.0, str(v))


def read_summary_csv(path):
    """summary.csv as (axis keys, rows as dicts of text), or ([], []) when absent/unreadable."""
    if not os.path.isfile(path):
        return [], []
    try:
        with open(path, "r", encoding="utf-8", errors="replace", newline="") as f:
            rd = csv.reader(f)
            header = next(rd, [])
            rows = [dict(zip(header, r)) for r in rd if r]
    except (OSError, csv.Error) as e:
        note("cannot read %s: %s" % (path, e))
        return [], []
    if header[:2] != ["row", "name"] or "seed" not in header:
        note("%s: not a summary of this binary's format (row, name, axes, seed, ...); ignored" % path)
        return [], []
    return [c for c in header[2:header.index("seed")] if c], rows


class Sweep:
    """A sweep directory. Its summary (`normlab report --json SWEEP`, which needs sweep.yaml; else
    summary.csv) gives each point's numbers, the seed mean and std of each group (its `mean` and
    `std` rows) and, from the binary, each axis's short name. A point without a summary row (no
    summary at all: an older sweep directory) gets its numbers from `normlab report --json RUN`, and
    the figures then draw its seeds without a mean."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.label = os.path.basename(self.path.rstrip("/"))
        self.tune = None  # a tuned sweep's comparison: the summary's "tune" object (tune.arms[])
        self.axes, self.shorts, rows, self.summary_source = self._read_summary()
        run_rows = {r["name"]: r for r in rows if r.get("row") == "run" and r.get("name")}
        self.groups = [r for r in rows if r.get("row") in ("mean", "std")]
        runs_dir = os.path.join(self.path, "runs")
        names = list(run_rows)
        if os.path.isdir(runs_dir):
            for n in sorted(os.listdir(runs_dir)):
                if n not in run_rows and os.path.isdir(os.path.join(runs_dir, n)):
                    names.append(n)
        self.points = []  # dicts: name, dir, over {axis: text}, seed, status, run, summary_row, POINT_NUMBERS
        for n in names:
            d = os.path.join(runs_dir, n)
            pj = read_json(os.path.join(d, "point.json"))
            r = run_rows.get(n)
            over = {}
            if isinstance(pj.get("overrides"), dict):
                for k, v in pj["overrides"].items():
                    over[k] = value_text(v)
                    if k not in self.axes and k != "seed":
                        self.axes.append(k)
            for k in self.axes:
                if r is not None and r.get(k) not in (None, ""):
                    over[k] = value_text(r[k])
            has_metrics = os.path.isfile(os.path.join(d, "metrics.jsonl"))
            if not over and r is None and not has_metrics:
                continue
            seed = r.get("seed") if r is not None else pj.get("seed")
            p = {"name": n, "dir": d, "over": over, "summary_row": r,
                 "seed": "" if seed in (None, "") else value_text(seed),
                 "status": (r.get("status") if r is not None else "") or pj.get("status") or "",
                 "run": Run(d, n) if has_metrics else None}
            # the point's numbers: its summary row; without one, its run's report (the same numbers)
            for key in POINT_NUMBERS:
                if r is not None:
                    p[key] = num(r.get(key))
                else:
                    p[key] = p["run"].derived(key) if p["run"] is not None else float("nan")
            p["diverged"] = (finite(p["diverged"]) and p["diverged"] > 0) or p["status"] == "diverged"
            p["failed"] = p["status"] == "failed"
            self.points.append(p)
        self.axes = [a for a in self.axes if any(a in p["over"] for p in self.points)]
        self._floors = None

    def _read_summary(self):
        """(axes, {axis: short name}, rows, source): from `normlab report --json SWEEP` when the
        directory has sweep.yaml, else summary.csv (short names then the full keys), else nothing."""
        if os.path.isfile(os.path.join(self.path, "sweep.yaml")):
            j = normlab_report(self.path)
            if isinstance(j.get("rows"), list) and isinstance(j.get("axes"), list):
                axes = [a["key"] for a in j["axes"] if isinstance(a, dict) and a.get("key")]
                shorts = {a["key"]: a.get("short") or a["key"] for a in j["axes"] if isinstance(a, dict) and a.get("key")}
                rows = [r for r in j["rows"] if isinstance(r, dict)]
                self.tune = j.get("tune") if isinstance(j.get("tune"), dict) else None
                return axes, shorts, rows, "normlab report --json"
        csv_path = os.path.join(self.path, "summary.csv")
        axes, rows = read_summary_csv(csv_path)
        if rows:
            note("%s: the sweep summary from summary.csv (no `normlab report --json` of the sweep); "
                "axes under their full keys" % self.path)
            return axes, {}, rows, "summary.csv"
        note("%s: no sweep summary (sweep.yaml with `normlab report --json`, or summary.csv): each run's "
            "numbers from its own report, seeds drawn without a mean" % self.path)
        return [], {}, [], None

    # ---- the summary's seed statistics --------------------------------------------------------

    def group_row(self, kind, over):
        """The summary's `mean` or `std` row of the group whose axis values are `over` (the point's
        values of every axis), or None."""
        for r in self.groups:
            if r.get("row") == kind and all(value_text(r.get(a, "")) == over.get(a) for a in self.axes):
                return r
        return None

    def seed_stat(self, kind, over, column):
        """The summary's seed mean or std ('mean' / 'std') of `column` for the group of `over`:
        seed_stats of src/metrics/records.cpp (over the seeds with a finite value, sample std).
        nan when there is no summary, no such group or the value is null (std of one seed)."""
        r = self.group_row(kind, over)
        return num(r.get(column)) if r is not None else float("nan")

    # ---- the floors: the runs' own (`normlab report --json RUN`) --------------------------------

    def floor(self, key):
        """entropy_floor (val) or train_entropy_floor of the first run whose report has one; nan when
        none has (the runs of one sweep read the same data)."""
        if self._floors is None:
            self._floors = {}
            for k in ("entropy_floor", "train_entropy_floor"):
                self._floors[k] = next((v for v in (p["run"].derived(k) for p in self.points if p["run"] is not None)
                                        if finite(v)), float("nan"))
        return self._floors[key]

    # ---- axes ------------------------------------------------------------------------------------

    def values(self, axis):
        vs = {p["over"].get(axis) for p in self.points if p["over"].get(axis) is not None}
        return sorted(vs, key=sort_key)

    def varying(self):
        return [a for a in self.axes if len(self.values(a)) > 1]

    def short(self, axis):
        """The axis's short name from `normlab report --json SWEEP` (the one the point names use);
        the full key without it."""
        return self.shorts.get(axis, axis)

    def resolve_axis(self, key):
        if key is None:
            return None
        for a in self.axes:
            if key == a or key == self.short(a) or a.endswith("." + key):
                return a
        print("plot.py: --group-by %r is not an axis of this sweep (axes: %s)"
              % (key, ", ".join(self.axes) or "none"), file=sys.stderr)
        raise SystemExit(2)

    def tied(self, a, b):
        """True when axis b's value is a function of axis a's and vice versa (a zip axis)."""
        fa, fb = {}, {}
        for p in self.points:
            va, vb = p["over"].get(a), p["over"].get(b)
            if fa.setdefault(va, vb) != vb or fb.setdefault(vb, va) != va:
                return False
        return True


def categorical_axes(sweep):
    """Varying axes with a value that is not a number (layout names, norm types, true/false)."""
    return [a for a in sweep.varying() if any(not finite(num(v)) for v in sweep.values(a))]


def kind_of(d):
    """'run' (metrics.jsonl), 'sweep' (sweep.yaml, summary.csv or runs/*/point.json|metrics.jsonl) or None."""
    if os.path.isfile(os.path.join(d, "metrics.jsonl")):
        return "run"
    if os.path.isfile(os.path.join(d, "sweep.yaml")) or os.path.isfile(os.path.join(d, "summary.csv")):
        return "sweep"
    runs = os.path.join(d, "runs")
    if os.path.isdir(runs):
        for n in os.listdir(runs):
            if os.path.isfile(os.path.join(runs, n, "point.json")) or os.path.isfile(os.path.join(runs, n, "metrics.jsonl")):
                return "sweep"
    return None


def _md_cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _md_delta(text):
    """'+0.400 [+0.366, +0.434]' as (delta, lo, hi); '-' (the baseline) as nan, nan, nan."""
    head, _, rest = text.partition("[")
    lo, _, hi = rest.rstrip("]").partition(",")
    return num(head), num(lo), num(hi)


class TableError(ValueError):
    """A summary.md that is not the tuned tables asked for (read_tuned_md); its text says why."""


def read_tuned_md(path, key, rung=None):
    """The tuned tables of a sweep's summary.md (what the sweep writes and `normlab report` prints;
    the copies shipped under configs/sweeps/results/): one dict per arm and rung, the numbers as
    printed. A ladder's tables sit under '### KEY = RUNG' headings (a heading naming another key
    is a TableError); `rung` keeps only that rung of a ladder, or names the rung of a sweep without
    one (whose table has no heading; without `rung` that is a TableError). Keys: arm, rung (a
    number where the rung is one, else its text), tuned (the tuned key, from the 'selected KEY'
    column), selected (the value the arm ran at) and from_rung (the searched rung it came from
    on a ladder, 'given' for a value tune.given set, else ''), edge, confirm (the
    'mean ± std (n)' text), delta, lo, hi (the Δ column and its 95 % interval; nan for the
    baseline and for '-'), p_adj, mde, verdict (its first word: baseline, better, worse,
    equivalent, inconclusive, tie, none, pending) and at_entropy (the row says the arm learned
    nothing); and from the section's text, metric (its title's 'by METRIC'), margin (the
    'inside ±X' of its equivalence rule; nan without one) and holm (whether p_adj is Holm's)."""
    rows, heading, cols = [], None, None
    metric, margin, holm = "", float("nan"), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s.startswith("## Tuned comparison") and ", by " in s:
                metric = s.rsplit(", by ", 1)[1].strip()
            if "inside ±" in s:
                margin = num(s.split("inside ±", 1)[1].split(" ", 1)[0].rstrip(",;)"))
            if "Holm's step-down correction" in s:
                holm = True
            if s.startswith("## ") and rows:  # the tuned comparison is the first section with tables
                break
            if s.startswith("### ") and " = " in s:
                hkey, heading = (x.strip() for x in s[4:].split(" = ", 1))
                if hkey != key:
                    raise TableError("%s: a ladder over %s ('%s'), not %s" % (path, hkey, s, key))
                cols = None
                continue
            if not s.startswith("|"):
                cols = None
                continue
            cells = _md_cells(s)
            if cols is None:
                cols = cells if len(cells) > 1 and cells[0] == "arm" and cells[1].startswith("selected ") else []
                continue
            if not cols or set(s) <= set("|-: "):
                continue
            at = heading if heading is not None else rung
            if at is None:
                raise TableError("%s: a table without a '### %s = RUNG' heading; name its rung as %s@RUNG"
                                 % (path, key, path))
            if heading is not None and rung is not None and num(heading) != num(rung) and heading != rung:
                continue
            r = dict(zip(cols, cells))
            delta, lo, hi = _md_delta(r.get("Δ [95 % interval]", "-"))
            verdict = r.get("verdict", "")
            selected, _, from_rung = r.get(cols[1], "").partition(" from ")
            if selected.endswith(" given"):  # tune.given: chosen outside the sweep
                selected, from_rung = selected[:-len(" given")], "given"
            rows.append({"arm": r.get("arm", ""), "rung": num(at) if finite(num(at)) else at,
                         "tuned": cols[1][len("selected "):].strip(), "selected": num(selected),
                         "from_rung": from_rung.strip(),
                         "edge": r.get("edge", "") == "edge",
                         "confirm": r.get("confirm mean ± std (n)", ""), "delta": delta, "lo": lo, "hi": hi,
                         "p_adj": num(r.get("p_adj")), "mde": num(r.get("mde")),
                         "verdict": verdict.split(" ", 1)[0] if verdict else "",
                         "at_entropy": "learned nothing" in verdict, "metric": metric, "margin": margin,
                         "holm": holm})
    return rows
