#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install what is missing, build everything and run
# the whole test suite through CTest. Extra arguments go to ctest (e.g. -R Config).
# NORMLAB_TORCH=pip scripts/test.sh does the same against the pinned PyTorch 2.x wheel
# (scripts/torch_env.sh); .ci/run runs both.
#
# scripts/test.sh --quick runs the unit tier only (no training run, no child process; tests/README.md)
# in one test process after the same set-up and build: under 2 minutes once built. Extra arguments
# go to the test binary (e.g. --gtest_filter=...).
#
# scripts/test.sh --sanitize [ctest args] builds and runs the suite with AddressSanitizer and
# UndefinedBehaviorSanitizer (NormLab's code instrumented, LibTorch not) in build-asan/; any report
# fails its test. Leaks inside LibTorch's own start-up are suppressed (tests/sanitize/lsan.supp).
# CI runs a subset (.ci/run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
quick=0
if [ "${1:-}" = --quick ]; then
  shift
  quick=1
fi
if [ "${1:-}" = --sanitize ]; then
  shift
  export NORMLAB_SANITIZE=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/tests/sanitize/lsan.supp:print_suppressions=0}"
fi
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh"
cd "$NORMLAB_BUILD"
if [ "$quick" = 1 ]; then
  # One process for the whole tier: LibTorch's start-up (~0.6 s) is paid once, not per test.
  cd "$ROOT"
  OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4 \
    "$NORMLAB_BUILD/tests/normlab_tests" --gtest_brief=1 --gtest_filter="$(cat "$NORMLAB_BUILD/tests/unit_filter.txt")" "$@"
  exit
fi
ctest --output-on-failure -j "${NORMLAB_TEST_JOBS:-2}" "$@"
