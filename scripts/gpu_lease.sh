#!/usr/bin/env bash
# One GPU lease, start to end, as one command (scripts/README.md, "gpu_lease.sh"): build normlab on
# the machine (scripts/gpu_build.sh; .debs/ and the Shakespeare files carried along), run the given
# sweeps one after another with every CPU core a job (scripts/gpu_studies.sh) until DEADLINE_S
# seconds after this script started, meanwhile build the tests and run the CUDA suites (Cuda*), then
# pack each sweep's directory without its checkpoints into OUT_DIR/<sweep>.tgz, the form in which the
# runs come back (a lease returns a few files, not a tree). Unpacked under runs/sweeps/ on another
# machine, `normlab report` and `scripts/plot.py` read them there; a re-run of the sweep there would
# mix machines, which its summary would flag.
#   scripts/gpu_lease.sh OUT_DIR DEADLINE_S SWEEP.yaml [SWEEP.yaml ...]
# Environment: MAX_SWEEPS (1) sweeps at a time, the cores split between them; EXTRA_CMD, a command
# run beside the sweeps until the deadline (SIGINT then), e.g. a coordinate check writing under
# $OUT_DIR: EXTRA_CMD='build-gpu/normlab coordcheck -c configs/default.yaml --widths 512,1024 ...
# --set train.device=cuda --out OUT_DIR/coord' (coordcheck keeps every finished size on a stop).
# Writes OUT_DIR/machine.txt, build.log, cuda_tests.log, logs/ (the sweeps' logs), <sweep>.tgz,
# and extra.log with EXTRA_CMD.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
out="$1"; deadline="$2"; shift 2
sweeps="${MAX_SWEEPS:-1}"
[[ "$sweeps" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_lease: MAX_SWEEPS=$sweeps: expected an integer >= 1" >&2; exit 2; }
mkdir -p "$out/logs"
{ nvidia-smi; nproc; free -g; } > "$out/machine.txt" 2>&1
NORMLAB_JOBS="$(nproc)" scripts/gpu_build.sh --target normlab > "$out/build.log" 2>&1 \
  || { tail -40 "$out/build.log"; exit 1; }
echo "$(date +%T) normlab built after $SECONDS s" | tee -a "$out/build.log"
source build-gpu/env.sh
# The CUDA suites, beside the sweeps: four compile jobs, then the Cuda* tests (they compare the GPU
# against the CPU; a slower step under the sweeps' load changes no number they check).
( cmake --build build-gpu -j 4 --target normlab_tests && echo "tests built after $SECONDS s" \
  && build-gpu/tests/normlab_tests --gtest_filter='Cuda*' ) > "$out/cuda_tests.log" 2>&1 &
tests=$!
budget=$((deadline - SECONDS - 30))
extra=""
if [ -n "${EXTRA_CMD:-}" ] && [ "$budget" -gt 0 ]; then
  # SIGINT at the budget (a coordinate check keeps what it finished), KILL 15 s later.
  ( timeout -k 15 -s INT "$budget" bash -c "$EXTRA_CMD"; echo "extra command rc=$? after $SECONDS s" ) \
    > "$out/extra.log" 2>&1 &
  extra=$!
fi
# The cores split between the sweeps that run at once (no more than are given).
at_once=$(( sweeps < $# ? sweeps : $# )); at_once=$(( at_once > 0 ? at_once : 1 ))
MAX_SWEEPS="$sweeps" JOBS="$(( $(nproc) / at_once > 0 ? $(nproc) / at_once : 1 ))" \
  scripts/gpu_studies.sh "$budget" "$out/logs" "$@"
[ -n "$extra" ] && wait "$extra"
# Tests get what is left of the deadline, less the packing time.
while kill -0 "$tests" 2>/dev/null && [ "$SECONDS" -lt $((deadline - 15)) ]; do sleep 2; done
kill "$tests" 2>/dev/null && echo "stopped at the deadline" >> "$out/cuda_tests.log"
for f in "$@"; do
  n="$(basename "$f" .yaml)"
  [ -d "runs/sweeps/$n" ] && tar czf "$out/$n.tgz" --exclude=checkpoints -C runs/sweeps "$n"
done
ls -la "$out"
echo "$(date +%T) lease script done after $SECONDS s"
