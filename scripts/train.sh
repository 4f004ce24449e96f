#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install what is missing, build, and train the
# default config on the shipped toy corpus. Extra arguments go to `normlab train`
# (e.g. scripts/train.sh --set train.steps=200).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" --target normlab
cd "$ROOT"
exec "${NORMLAB_BUILD_DIR:-$ROOT/build}/normlab" train -c configs/default.yaml "$@"
