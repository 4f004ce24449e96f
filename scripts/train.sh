#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install what is missing, build, and train the
# default config on the shipped toy corpus. Each call starts a new run directory
# runs/default-<date>-<time> unless --out is given. Extra arguments go to `normlab train`
# (e.g. scripts/train.sh --set model.layout=post --set train.steps=500).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --target normlab
cd "$ROOT"
args=("$@")
case " $* " in
  *" --out "*|*" --resume "*) ;;
  *) args+=(--out "runs/default-$(date +%Y%m%d-%H%M%S)") ;;
esac
exec "$NORMLAB_BUILD/normlab" train -c configs/default.yaml "${args[@]}"
