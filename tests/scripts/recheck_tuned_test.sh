#!/usr/bin/env bash
# scripts/recheck_tuned.py: its t distribution and Holm against known values, every shipped tuned
# results file (configs/sweeps/results/*.md) holding to the runs it lists (each printed Δ, interval,
# p, p_adj and mde recomputed from the Runs table), and planted errors (an interval end, a run's
# best val, a ladder rung's mde, a larger-is-better p_adj, a fitted optimum,
# an arm with nothing to recompute from) caught. Run from the repository root (CTest does):
#   tests/scripts/recheck_tuned_test.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/normlab_recheck_tuned_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
SCRIPT="$ROOT/scripts/recheck_tuned.py"
fail() { echo "recheck_tuned_test: FAIL: $*" >&2; exit 1; }

python3 - "$SCRIPT" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("recheck_tuned", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
# Student's t quantiles (standard tables) and the mde factors the docs quote (5.4 se at df 2).
for p, df, want in ((0.975, 2, 4.302653), (0.80, 2, 1.060660), (0.975, 7, 2.364624), (0.80, 7, 0.896030),
                    (0.975, 1e6, 1.959966), (0.975, 30, 2.042272)):
    got = m.t_quantile(p, df)
    assert abs(got - want) < 2e-4, (p, df, got, want)
assert abs(m.t_quantile(0.975, 2) + m.t_quantile(0.80, 2) - 5.3633) < 1e-3
# Holm: sorted p times (k - j + 1), made non-decreasing, capped at 1; None is not a test.
assert m.holm([0.01, 0.04, None, 0.03]) == [0.03, 0.06, None, 0.06], m.holm([0.01, 0.04, None, 0.03])
assert m.holm([0.5, 0.6]) == [1.0, 1.0]
# Welch and paired on small hand cases: Δ, se, df.
d, se, df = m.welch([1.0, 2.0, 3.0], [0.0, 0.0, 3.0])
assert abs(d - 1.0) < 1e-12 and abs(se - (1.0 / 3 + 3.0 / 3) ** 0.5) < 1e-12, (d, se)
assert abs(df - (4.0 / 3) ** 2 / ((1.0 / 3) ** 2 / 2 + 1.0 / 2)) < 1e-12, df
d, se, df = m.paired([1.0, 2.0, 4.0], [0.0, 1.0, 2.0])
assert abs(d - 4.0 / 3) < 1e-12 and df == 2 and abs(se - (1.0 / 3) ** 0.5 / 3 ** 0.5) < 1e-12, (d, se, df)
PY

# Every shipped tuned results file: no mismatch, and numbers really compared where a table has arms.
n=0
for f in $(grep -l '^| arm | selected ' "$ROOT"/configs/sweeps/results/*.md); do
  out=$(python3 "$SCRIPT" --check "$f") || fail "$(basename "$f"): $(echo "$out" | grep MISMATCH | head -3)"
  arms=$(awk '/^\| arm \| selected /{t=1; next} !/^\|/{t=0} t && /\| (better|worse|tie|equivalent|inconclusive)[^|]*\|$/' "$f" | wc -l)
  if [ "$arms" -gt 0 ]; then
    echo "$out" | grep -q 'check: [1-9][0-9]* printed numbers, 0 mismatches' || fail "$(basename "$f"): nothing compared"
  fi
  n=$((n + 1))
done
[ "$n" -ge 20 ] || fail "only $n tuned results files found"

R="$ROOT/configs/sweeps/results"
# A printed interval end that the runs do not give.
sed 's/| -0.0295 \[-0.0470, -0.0121\]/| -0.0295 [-0.0570, -0.0121]/' "$R/tuned_norms.md" > "$TMP/a.md"
cmp -s "$TMP/a.md" "$R/tuned_norms.md" && fail "the interval to plant was not found"
if out=$(python3 "$SCRIPT" --check "$TMP/a.md"); then fail "a wrong interval end passed"; fi
echo "$out" | grep -q 'MISMATCH norm.type=rmsnorm_free: low printed -0.057' || fail "wrong report: $out"
# A run's best val changed (the baseline's confirm seed 2002): every arm's Δ moves.
sed 's/^\(| layernorm | 1.6e-2 | 2002 | done | 300 | [0-9.]* | \)[0-9.]*/\12.0000/' "$R/tuned_norms.md" > "$TMP/b.md"
cmp -s "$TMP/b.md" "$R/tuned_norms.md" && fail "the run to plant was not found"
if out=$(python3 "$SCRIPT" --check "$TMP/b.md"); then fail "a changed run passed"; fi
echo "$out" | grep -q 'MISMATCH norm.type=rmsnorm: Δ printed' || fail "wrong report: $out"
# A ladder rung's mde (the depth ladder's Post-LN at L = 8, printed 0.035).
awk '/^### model.n_layers = 8/{r=1} r && /^\| layout=post,/ && !d {sub(/\| 0\.035 \|/, "| 0.045 |"); d=1} {print}' \
  "$R/depth_ladder.md" > "$TMP/c.md"
cmp -s "$TMP/c.md" "$R/depth_ladder.md" && fail "the mde to plant was not found"
if out=$(python3 "$SCRIPT" --check "$TMP/c.md"); then fail "a wrong mde passed"; fi
echo "$out" | grep -q 'MISMATCH n_layers = 8: layout=post.*: mde printed 0.045' || fail "wrong report: $out"
# A ladder's larger-is-better p_adj (Pre-LN LayerNorm, d = 64 -> 256, printed 0.05).
sed 's/^\(| norm.type=layernorm,layout=pre | 64 -> 256 | -0.019 \[-0.033, -0.005\] | 0.017 | \)0.05 |/\10.15 |/' \
  "$R/width_norms_mup_shakespeare_256.md" > "$TMP/d.md"
cmp -s "$TMP/d.md" "$R/width_norms_mup_shakespeare_256.md" && fail "the p_adj to plant was not found"
if out=$(python3 "$SCRIPT" --check "$TMP/d.md"); then fail "a wrong larger-is-better p_adj passed"; fi
echo "$out" | grep -q 'MISMATCH larger is better.*layout=pre 64 -> 256: p_adj printed 0.15' || fail "wrong report: $out"
# A fitted optimum (µP at d = 512 on Shakespeare, printed 0.0181).
sed 's/^\(| d_model=512,d_ff=2048,type=mup,base_width=64 | 3.2e-2 | \)0.0181 /\10.0191 /' \
  "$R/width_transfer_shakespeare.md" > "$TMP/e.md"
cmp -s "$TMP/e.md" "$R/width_transfer_shakespeare.md" && fail "the fitted optimum to plant was not found"
if out=$(python3 "$SCRIPT" --check "$TMP/e.md"); then fail "a wrong fitted optimum passed"; fi
echo "$out" | grep -q 'MISMATCH fitted d_model=512,d_ff=2048,type=mup,base_width=64: printed 0.0191' || fail "wrong report: $out"
# An arm whose printed selection has no confirm runs in the Runs table cannot pass unchecked.
sed 's/^| norm.type=ssnorm | 8.0e-3 |/| norm.type=ssnorm | 4.0e-3 |/' "$R/tuned_norms.md" > "$TMP/f.md"
cmp -s "$TMP/f.md" "$R/tuned_norms.md" && fail "the selection to plant was not found"
if out=$(python3 "$SCRIPT" --check "$TMP/f.md"); then fail "an arm with nothing to recompute from passed"; fi
grep -q 'MISMATCH norm.type=ssnorm: printed a Δ, but the Runs table has 0 matching' <<<"$out" || fail "wrong report: $out"

# --across: a ladder run as separate sweeps. One file given twice is the file's own ladder (a later
# rung replaces the earlier), so its pairs must be the report's larger-is-better table (the width
# ladder's Pre-LN d = 64 -> 256: -0.019 [-0.033, -0.005], p_adj 0.05 over the arm's three pairs).
W="$R/width_norms_mup_shakespeare_256.md"
out=$(python3 "$SCRIPT" --across "$W" "$W") || fail "--across on a ladder file failed: $out"
grep -q '^| norm.type=layernorm,layout=pre | 64 -> 256 | 8 | -0.0186 \[-0.0327, -0.0046\] | 0.017 | 0.05 | 0.0194 | better |$' \
  <<<"$out" || fail "--across does not give the report's larger-is-better row: $out"
grep -q '^| norm.type=layernorm,layout=sandwich | 128 -> 256 | 8 | .* | equivalent |$' <<<"$out" \
  || fail "--across: Sandwich 128 -> 256 is equivalent within the file's margin 0.01: $out"
[ "$(grep -c '^| norm.type=layernorm,layout=post |' <<<"$out")" -eq 3 ] || fail "--across: not three pairs an arm: $out"
# A rung from another file joins each arm's family: with the rung d = 64's table moved out to a file
# of its own (the others left in a second file), the pairs and Holm over them are unchanged.
split() {  # $1: 1 keeps the d = 64 rung's table, 0 the other rungs' (the Runs table in both)
  awk -v want="$1" '/^### model.d_model = /{keep = (($0 ~ /= 64$/) == want)} /^## Runs/{keep=1}
    /^\| arm \| smaller -> larger/{keep=0} keep || !/^(###|\|)/' "$W"
}
split 1 > "$TMP/w64.md"; split 0 > "$TMP/wrest.md"
grep -q '^### model.d_model = 64$' "$TMP/w64.md" && ! grep -q '^### model.d_model = 128$' "$TMP/w64.md" \
  && ! grep -q '^### model.d_model = 64$' "$TMP/wrest.md" && grep -q '^### model.d_model = 256$' "$TMP/wrest.md" \
  || fail "the files of one rung and of the rest were not made"
out2=$(python3 "$SCRIPT" --across "$TMP/wrest.md" "$TMP/w64.md") || fail "--across on two files failed: $out2"
[ "$(tail -n +2 <<<"$out")" = "$(tail -n +2 <<<"$out2")" ] || fail "--across: a rung from another file changed the table"
# The shipped width ladder, d = 64..256 and d = 512 as two sweeps: six pairs an arm, Holm over six.
out=$(python3 "$SCRIPT" --across "$W" "$R/width_norms_mup_shakespeare_512.md") || fail "--across 256 + 512 failed: $out"
[ "$(grep -c '^| norm.type=layernorm,layout=post |' <<<"$out")" -eq 6 ] || fail "--across: not six pairs an arm: $out"
grep -q '^| norm.type=layernorm,layout=post | 64 -> 512 | 8 | +0.0463 \[+0.0180, +0.0747\] | 0.0062 | 0.037 | 0.0391 | worse |$' \
  <<<"$out" || fail "--across: the width ladder's Post-LN 64 -> 512 row: $out"
# A single-rung sweep named FILE@VALUE: the depth ladder's L = 16 sweep beside its L = 2, 4, 8 ladder
# (Pre-LN L = 8 -> 16: -0.018 [-0.034, -0.001], p 0.036, as the front page says).
out=$(python3 "$SCRIPT" --across "$R/depth_ladder.md" "$R/depth_ladder_l16.md@16") || fail "--across FILE@16 failed: $out"
grep -q '^| layout=pre,type=sp,base_depth=auto | 8 -> 16 | 8 | -0.0175 \[-0.0336, -0.0015\] | 0.036 | ' <<<"$out" \
  || fail "--across: the depth ladder's Pre-LN 8 -> 16 row: $out"
# Bad input: a single-rung file without its @VALUE, a Welch study.
if out=$(python3 "$SCRIPT" --across "$R/depth_ladder.md" "$R/depth_ladder_l16.md" 2>&1); then fail "--across took a file without its rung"; fi
grep -q 'depth_ladder_l16.md: no .### KEY = VALUE. rung heading.*FILE@VALUE' <<<"$out" || fail "wrong message: $out"
if out=$(python3 "$SCRIPT" --across "$W" "$R/tuned_norms.md" 2>&1); then fail "--across took a Welch study"; fi
grep -q 'tuned_norms.md: a welch study' <<<"$out" || fail "wrong message: $out"
echo "recheck_tuned_test: $n results files recomputed, planted errors caught, --across agrees with the report"
