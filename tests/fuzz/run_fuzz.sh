#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while:
#   tests/fuzz/run_fuzz.sh [seconds per target, default 60]
# Seeds: the shipped configs. Crashes land in build-fuzz/crashes/<target>/; turn each into a test.
# Only the sources a target needs are compiled (no LibTorch), so a build takes about a minute.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SECONDS_EACH="${1:-60}"
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT"
CXX="${CXX:-clang++}"
FLAGS=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$ROOT/src")
SRC=("$ROOT/src/config/load.cpp" "$ROOT/src/core/fs.cpp" "$ROOT/src/core/errors.cpp"
     "$ROOT/src/core/crash_point.cpp")
"$CXX" "${FLAGS[@]}" "$ROOT/tests/fuzz/config_fuzz.cpp" "${SRC[@]}" -lyaml-cpp -lfmt -o "$OUT/config_fuzz"

corpus="$OUT/corpus/config"
mkdir -p "$corpus" "$OUT/crashes/config"
find "$ROOT/configs" -name '*.yaml' -exec cp {} "$corpus/" \;
printf 'model: {d_model: 64}\n%%%%\noptim.lr=.inf\nmodel.norm.type=rmsnorm\n' > "$corpus/with_sets"
"$OUT/config_fuzz" "$corpus" -max_total_time="$SECONDS_EACH" -max_len=4096 -timeout=10 \
  -artifact_prefix="$OUT/crashes/config/" -print_final_stats=1
