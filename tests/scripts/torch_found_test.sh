#!/usr/bin/env bash
# The BLAS settings follow the LibTorch CMake actually found, however it was found
# (third_party/dependencies.cmake): configures (no build) in temporary directories
#   1. the default way (Debian's libtorch-dev): its libtorch_cpu loads libblas.so.3, so the
#      binaries get the OpenMP OpenBLAS rpath;
#   2. the pinned pip LibTorch found the standard ways, -DCMAKE_PREFIX_PATH=<torch>/share/cmake and
#      -DTorch_DIR=<torch>/share/cmake/Torch, with Debian's libtorch-dev installed beside it: its libraries (not Debian's) are linked and no
#      OpenBLAS rpath is added (MKL is linked into the wheel).
# Case 2 is skipped (exit 77) when the pip LibTorch is not installed (scripts/setup.sh --pip-torch).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake -S "$ROOT" -B "$tmp/debian" >"$tmp/debian.log" 2>&1 || { tail -20 "$tmp/debian.log"; fail "default configure"; }
grep -q "libtorch_cpu.so loads a BLAS library dynamically: ON" "$tmp/debian.log" || fail "Debian's LibTorch: BLAS not detected"
grep -q -- "-rpath,/usr/lib/[^ ]*/openblas-openmp" "$tmp/debian/CMakeFiles/normlab.dir/link.txt" \
  || fail "Debian's LibTorch: no OpenMP OpenBLAS rpath on the link line"
echo "ok: Debian's LibTorch loads a BLAS; the OpenMP OpenBLAS rpath is set"

if [ ! -f "$NORMLAB_TORCH_PIP_PREFIX/.complete" ]; then
  echo "skip: the pip LibTorch is not installed ($NORMLAB_TORCH_PIP_PREFIX)"
  exit 77
fi
pip_torch="$(realpath "$NORMLAB_TORCH_PIP_PREFIX/torch")"
for how in "CMAKE_PREFIX_PATH=$pip_torch/share/cmake" "Torch_DIR=$pip_torch/share/cmake/Torch"; do
  dir="$tmp/${how%%=*}"
  cmake -S "$ROOT" -B "$dir" "-D$how" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; fail "configure with -D$how"; }
  grep -q "NormLab: LibTorch from $pip_torch/lib" "$dir.log" \
    || { grep NormLab "$dir.log"; fail "-D$how: libraries not taken from $pip_torch/lib"; }
  grep -q "loads a BLAS library dynamically: OFF" "$dir.log" || fail "-D$how: a dynamically loaded BLAS reported"
  link="$dir/CMakeFiles/normlab.dir/link.txt"
  ! grep -q "openblas-openmp" "$link" || fail "-D$how: OpenMP OpenBLAS rpath on the link line"
  ! grep -qE "/usr/lib/[^ ]*/lib(torch|c10)[^ ]*\.so" "$link" || fail "-D$how: Debian's libtorch/libc10 on the link line"
  echo "ok: the pip LibTorch found through -D${how%%=*} links its own libraries, no OpenBLAS rpath"
done
