#!/bin/bash
# Each guarantee's test is seen to fail without its fix: each patch here disables one fix
# (tests/mutants/mutants.txt says which, and which test must then fail); this applies it, rebuilds
# build/ (Debian's LibTorch), runs the named tests, reverts. .ci/run runs it after the suite and
# fails when a patch no longer applies or a mutant survives (its test passed): a patch that stopped
# applying after a change to the code it touches is refreshed by making the same one-line change
# again and `git diff > tests/mutants/NN-name.patch`.
# Run from a clean work tree: tests/mutants/run_mutants.sh
set -u
bad=0
cd "$(dirname "$0")/../.."
export OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4
(cd build && make -j2 normlab normlab_tests 2>&1 | grep -E " error")
for p in tests/mutants/*.patch; do
  n=$(basename $p .patch)
  f=$(cat tests/mutants/$n.filter)
  git apply $p || { echo "$n: APPLY FAILED"; bad=1; continue; }
  if ! (cd build && make -j2 normlab normlab_tests 2>&1 | grep -E " error|Error " ); then :; fi
  extra=""
  [[ $n == 04-* ]] && extra="--gtest_repeat=10"  # timing-dependent: a swap seen missing is very likely in 3 rounds, near certain in 10
  # The tests run in a session of their own (setsid), whose leader writes its PID, the session's id,
  # to $sid_file. Whatever they started and left behind (mutant 01's second `normlab train`, which
  # trains toward steps=100000; children in process groups of their own) is in that session, and
  # only those processes are killed afterwards.
  sid_file="$(mktemp)"
  setsid -w bash -c 'echo $$ > "$0"; exec timeout -s KILL 240 "$@"' "$sid_file" \
    build/tests/normlab_tests --gtest_filter="$f" $extra > /tmp/mutant-$n.log 2>&1
  rc=$?
  sid="$(cat "$sid_file")"
  rm -f "$sid_file"
  left="$(ps -o pid= -s "$sid" 2>/dev/null || true)"
  [ -n "$left" ] && kill -KILL $left 2>/dev/null
  if [ $rc -ne 0 ]; then echo "$n: KILLED-BY-MUTANT (test failed, rc=$rc) [$f]"; else echo "$n: SURVIVED (tests passed) [$f]"; bad=1; fi
  git apply -R $p
done
(cd build && make -j2 normlab normlab_tests 2>&1 | grep -E " error")
echo ALLDONE
exit $bad
