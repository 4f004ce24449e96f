#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while (the config
# loader: YAML plus --set lines; the safetensors header checks):
#   tests/fuzz/run_fuzz.sh [seconds per target, default 60]
# Seeds: the shipped configs; small safetensors files written here. Crashes land in
# build-fuzz/crashes/<target>/; turn each into a test. CI: 60 s each; before a release: 1800.
# Only the sources a target needs are compiled (no LibTorch), so a build takes about a minute.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SECONDS_EACH="${1:-60}"
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT"
CXX="${CXX:-clang++}"
# clang and its fuzzer/sanitizer runtime (Debian 12's clang 14), installed when missing
if ! command -v "$CXX" >/dev/null || ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "ok installed"; then
  echo "run_fuzz: installing clang libclang-rt-14-dev" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev >&2
fi
FLAGS=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$ROOT/src")
CORE=("$ROOT/src/core/fs.cpp" "$ROOT/src/core/errors.cpp" "$ROOT/src/core/crash_point.cpp")
"$CXX" "${FLAGS[@]}" "$ROOT/tests/fuzz/config_fuzz.cpp" "$ROOT/src/config/load.cpp" "${CORE[@]}" \
  -lyaml-cpp -lfmt -o "$OUT/config_fuzz"
"$CXX" "${FLAGS[@]}" "$ROOT/tests/fuzz/safetensors_fuzz.cpp" "$ROOT/src/train/safetensors_header.cpp" \
  "${CORE[@]}" -lyaml-cpp -lfmt -o "$OUT/safetensors_fuzz"

mkdir -p "$OUT/corpus/config" "$OUT/corpus/safetensors"
find "$ROOT/configs" -name '*.yaml' -exec cp {} "$OUT/corpus/config/" \;
printf 'model: {d_model: 64}\n%%%%\noptim.lr=.inf\nmodel.norm.type=rmsnorm\n' > "$OUT/corpus/config/with_sets"
python3 - "$OUT/corpus/safetensors" <<'PY'
import json, struct, sys
def write(name, tensors, meta):
    header, data, off = {"__metadata__": meta}, b"", 0
    for tname, shape in tensors:
        n = 4
        for d in shape: n *= d
        header[tname] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        data += bytes(n); off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<Q", len(h)) + h + data)
write("two", [("tok_emb.weight", [4, 3]), ("blocks.0.norm1.weight", [3])], {"format": "normlab", "config": "model:\n  d_model: 3\n"})
write("empty", [], {"format": "normlab"})
write("scalar", [("s", [])], {})
PY

status=0
for target in config safetensors; do
  mkdir -p "$OUT/crashes/$target"
  "$OUT/${target}_fuzz" "$OUT/corpus/$target" -max_total_time="$SECONDS_EACH" -max_len=4096 -timeout=10 \
    -artifact_prefix="$OUT/crashes/$target/" -print_final_stats=1 || status=1
done
exit $status
