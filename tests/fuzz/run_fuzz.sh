#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while (config: the
# config loader, YAML plus --set lines; safetensors: the safetensors header checks; sweep: the
# sweep-file parser, expansion, point validation and the dumped sweep.yaml):
#   tests/fuzz/run_fuzz.sh [seconds per target, default 60]
# Seeds: the shipped configs and sweeps, a few hand-written ones; small safetensors files written
# here. Crashes land in build-fuzz/crashes/<target>/; turn each into a test. CI: 30 s each (60 s with NORMLAB_CI_FULL=1); before
# a release: 1800. Only the sources a target needs are compiled (no LibTorch; the sweep target
# stands in for check_and_resolve, see sweep_fuzz.cpp), so a build takes about a minute a target.
# The sweep target works on a copy of this checkout's configs/ (path compiled in) made under
# build-fuzz/sweep-tree/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SECONDS_EACH="${1:-60}"
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT"
CXX="${CXX:-clang++}"
# clang and its fuzzer/sanitizer runtime (Debian 12's clang 14): scripts/setup.sh --fuzz installs them
if ! command -v "$CXX" >/dev/null || ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "ok installed"; then
  echo "run_fuzz: clang and libclang-rt-14-dev are missing; install them with: scripts/setup.sh --fuzz" >&2
  exit 2
fi
FLAGS=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$ROOT/src")
CORE=("$ROOT/src/core/fs.cpp" "$ROOT/src/core/errors.cpp" "$ROOT/src/core/crash_point.cpp")
# The config loader without LibTorch: the model's registries replaced by a stand-in owner table.
CONFIG=("$ROOT/src/config/load.cpp" "$ROOT/src/config/yaml_strict.cpp" "$ROOT/src/config/validate.cpp"
        "$ROOT/src/config/dump.cpp" "$ROOT/src/config/owned_keys.cpp" "$ROOT/tests/fuzz/key_owners_stub.cpp")
"$CXX" "${FLAGS[@]}" "$ROOT/tests/fuzz/config_fuzz.cpp" "${CONFIG[@]}" "${CORE[@]}" \
  -lyaml-cpp -lfmt -o "$OUT/config_fuzz"
"$CXX" "${FLAGS[@]}" "$ROOT/tests/fuzz/safetensors_fuzz.cpp" "$ROOT/src/train/safetensors_header.cpp" \
  "${CORE[@]}" -lyaml-cpp -lfmt -o "$OUT/safetensors_fuzz"
"$CXX" "${FLAGS[@]}" -DNORMLAB_SOURCE_DIR="\"$ROOT\"" "$ROOT/tests/fuzz/sweep_fuzz.cpp" \
  "$ROOT/src/sweep/sweep_config.cpp" "$ROOT/src/sweep/sweep_points.cpp" "$ROOT/src/sweep/tune_config.cpp" "${CONFIG[@]}" "$ROOT/src/core/json.cpp" \
  "${CORE[@]}" -lyaml-cpp -lfmt -lspdlog -o "$OUT/sweep_fuzz"

mkdir -p "$OUT/corpus/config" "$OUT/corpus/safetensors" "$OUT/corpus/sweep"
find "$ROOT/configs" -name '*.yaml' -exec cp {} "$OUT/corpus/config/" \;
printf 'model: {d_model: 64}\n%%%%\noptim.lr=.inf\nmodel.norm.type=rmsnorm\n' > "$OUT/corpus/config/with_sets"
cp "$ROOT"/configs/sweeps/*.yaml "$OUT/corpus/sweep/"
# Values whose text changes when read as YAML (the dump must keep them), zip and quick.
cat > "$OUT/corpus/sweep/odd_values" <<'YAML'
base: ../default.yaml
set: {model.norm: "type: rmsnorm"}
axes:
  model.layout: [" pre", post]
zip:
  - {optim.lr: [1.0e-3, "\t2e-3"], optim.warmup: [0, 10]}
seeds: [1, 2]
quick: {seeds: [1], axes: {model.layout: [pre]}}
YAML
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
rm -rf "$OUT/sweep-tree"  # copies left by crashed runs of the sweep target
export NORMLAB_SWEEP_FUZZ_DIR="$OUT/sweep-tree"
for target in config safetensors sweep; do
  mkdir -p "$OUT/crashes/$target"
  "$OUT/${target}_fuzz" "$OUT/corpus/$target" -max_total_time="$SECONDS_EACH" -max_len=4096 -timeout=10 \
    -artifact_prefix="$OUT/crashes/$target/" -print_final_stats=1 || status=1
done
exit $status
