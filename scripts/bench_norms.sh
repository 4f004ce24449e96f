#!/usr/bin/env bash
# Builds NormLab (scripts/setup.sh) and runs the norm micro-benchmark: forward+backward of every
# registered norm at rows 4096 and 16384 x widths 128, 512, 2048, each as a ratio to LibTorch's
# native layer_norm in the same run. Tables on stdout (Markdown), progress on stderr.
# Extra arguments go to `normlab bench norms` (e.g. --repeats 31 --threads 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --target normlab
exec "$NORMLAB_BUILD/normlab" bench norms "$@"
