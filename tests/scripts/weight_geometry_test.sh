#!/usr/bin/env bash
# scripts/weight_geometry.py on a tuned sweep directory the test writes itself, read through a
# stand-in `normlab report --json` whose per-block weight statistics are known: each arm's row
# averages the blocks, then the confirm seeds at the arm's selected value (mean, smallest and
# largest seed); search runs, confirm runs at another value, runs of another arm and runs not
# finished are left out; two sweeps' rows of one arm come side by side.
# Run from the repository root (CTest does): tests/scripts/weight_geometry_test.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/normlab_geometry_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "weight_geometry_test: FAIL: $*" >&2; exit 1; }

# Stand-in binary: `report RUN --json` prints the layers the run directory's stats.json holds.
cat > "$TMP/normlab" <<'SH'
#!/usr/bin/env bash
[ "$1" = report ] && [ "$3" = --json ] || exit 2
printf '{"layers": %s}\n' "$(cat "$2/stats.json")"
SH
chmod +x "$TMP/normlab"

/usr/bin/python3 - "$TMP" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def sweep(name, selected):
    d = os.path.join(tmp, name)
    os.makedirs(os.path.join(d, "runs"))
    arms = [{"name": "norm.type=a", "axes": {"model.norm.type": "a"}, "selected": selected["a"]},
            {"name": "norm.type=b", "axes": {"model.norm.type": "b"}, "selected": selected["b"]}]
    json.dump({"tune": {"key": "optim.lr", "arms": arms}}, open(os.path.join(d, "summary.json"), "w"))
    return d
def run(d, name, norm, lr, status, w_rms, spec, rank, cos):
    r = os.path.join(d, "runs", name)
    os.makedirs(r)
    json.dump({"name": name, "overrides": {"model.norm.type": norm, "optim.lr": lr}, "status": status},
              open(os.path.join(r, "point.json"), "w"))
    json.dump({"w_rms": w_rms, "w_spec_max": spec, "w_stable_rank": rank, "update_cos": cos},
              open(os.path.join(r, "stats.json"), "w"))
s1 = sweep("s_adamw", {"a": 0.004, "b": 0.002})
# arm a at 4e-3: block means 0.2 / 0.4 (w_rms), 3 / 5 (spec), 10 / 20 (rank), 0.1 / 0.3 (cos)
run(s1, "norm.type=a,lr=4.0e-3,confirm,seed=1", "a", "4.0e-3", "done", [0.1, 0.3], [2, 4], [5, 15], [0.0, 0.2])
run(s1, "norm.type=a,lr=4.0e-3,confirm,seed=2", "a", "4.0e-3", "done", [0.4, 0.4], [5, 5], [20, 20], [0.3, 0.3])
run(s1, "norm.type=a,lr=4.0e-3,confirm,seed=3", "a", "4.0e-3", "running", [9, 9], [9, 9], [9, 9], [9, 9])
run(s1, "norm.type=a,lr=4.0e-3,seed=1337", "a", "4.0e-3", "done", [9, 9], [9, 9], [9, 9], [9, 9])
run(s1, "norm.type=a,lr=8.0e-3,confirm,seed=1", "a", "8.0e-3", "done", [9, 9], [9, 9], [9, 9], [9, 9])
run(s1, "norm.type=b,lr=2.0e-3,confirm,seed=1", "b", "2.0e-3", "done", [1.0, 2.0], [7, 9], [1, 3], [-0.1, -0.3])
s2 = sweep("s_muon", {"a": 0.02, "b": None})
run(s2, "norm.type=a,lr=2.0e-2,confirm,seed=1", "a", "2.0e-2", "done", [0.6, 0.6], [1, 1], [30, 30], [0.5, 0.5])
PY

OUT=$(/usr/bin/python3 "$ROOT/scripts/weight_geometry.py" --normlab "$TMP/normlab" "$TMP/s_adamw" "$TMP/s_muon")
echo "$OUT"
expect() { grep -qF -- "$1" <<<"$OUT" || fail "missing row: $1"; }
expect "| norm.type=a | s_adamw | optim.lr=4.0e-03 | 2 | 0.3000 (0.2000-0.4000) | 4.00 (3.00-5.00) | 15.0 (10.0-20.0) | 0.200 (0.100-0.300) |"
expect "| norm.type=a | s_muon | optim.lr=2.0e-02 | 1 | 0.6000 (0.6000-0.6000) | 1.00 (1.00-1.00) | 30.0 (30.0-30.0) | 0.500 (0.500-0.500) |"
expect "| norm.type=b | s_adamw | optim.lr=2.0e-03 | 1 | 1.5000 (1.5000-1.5000) | 8.00 (8.00-8.00) | 2.0 (2.0-2.0) | -0.200 (-0.200--0.200) |"
expect "| norm.type=b | s_muon | - | 0 | - | - | - | - |"
[ "$(grep -c '^| norm.type=' <<<"$OUT")" = 4 ] || fail "expected 4 rows"
# the rows of one arm are adjacent (a, a, b, b)
[ "$(grep '^| norm.type=' <<<"$OUT" | cut -d'|' -f2 | tr -d ' ' | tr '\n' ' ')" = "norm.type=a norm.type=a norm.type=b norm.type=b " ] || fail "rows not grouped by arm"
# a directory that is not a tuned sweep is a one-line error
mkdir -p "$TMP/plain/runs" && echo '{"rows": []}' > "$TMP/plain/summary.json"
if /usr/bin/python3 "$ROOT/scripts/weight_geometry.py" --normlab "$TMP/normlab" "$TMP/plain" 2>"$TMP/err"; then fail "plain sweep accepted"; fi
grep -q "is not a tuned sweep" "$TMP/err" || fail "unexpected error: $(cat "$TMP/err")"
echo "weight_geometry_test: OK"
