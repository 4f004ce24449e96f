#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install what is missing, build everything and run
# the whole test suite through CTest. Extra arguments go to ctest (e.g. -R Config).
# NORMLAB_TORCH=pip scripts/test.sh does the same against the pinned PyTorch 2.x wheel
# (scripts/torch_env.sh); .ci/run runs both.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh"
cd "$NORMLAB_BUILD"
ctest --output-on-failure -j "${NORMLAB_TEST_JOBS:-2}" "$@"
