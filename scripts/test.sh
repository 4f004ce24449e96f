#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install what is missing, build everything and run
# the whole test suite through CTest. Extra arguments go to ctest (e.g. -R Config).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "${NORMLAB_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j "${NORMLAB_TEST_JOBS:-2}" "$@"
