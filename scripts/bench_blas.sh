#!/usr/bin/env bash
# Which BLAS runs the medium workload's GEMMs fastest on this machine (scripts/BENCHMARKS.md,
# "Against PyTorch 2.x"): scripts/bench_blas.c times sgemm_ on those shapes in each library that
# is installed, with the threads every NormLab binary uses (all cores, one OpenMP pool):
#   - OpenBLAS 0.3.21, OpenMP build (libopenblas0-openmp): what NormLab's default build loads
#   - BLIS 0.9.0, OpenMP build (apt install libblis4-openmp), AMD's recommended BLAS for Zen
#   - oneMKL from PyPI (the `mkl` wheel, unpacked into ~/.cache/normlab/mkl-<version> by
#     `scripts/bench_blas.sh --fetch-mkl`), GNU OpenMP threading layer
# A library that is not installed is reported as such. Run it on an otherwise idle machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MKL_VERSION=2026.2.0
MKL_DIR="${NORMLAB_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/normlab}/mkl-$MKL_VERSION"
if [ "${1:-}" = --fetch-mkl ]; then
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" "mkl==$MKL_VERSION"
  mkdir -p "$MKL_DIR"
  (cd "$MKL_DIR" && unzip -q -o -j "$tmp"/mkl-*.whl "mkl-$MKL_VERSION.data/data/lib/*" -d lib)
  rm -rf "$tmp"
fi
ARCH="$(gcc -print-multiarch)"
bin="$(mktemp -d)/bench_blas"
trap 'rm -rf "$(dirname "$bin")"' EXIT
gcc -O2 -o "$bin" "$ROOT/scripts/bench_blas.c" -ldl
threads="$(nproc)"
echo "machine: $threads cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
run() {  # NAME LIBRARY [ENV...]
  local name="$1" lib="$2"
  shift 2
  echo "== $name ($lib)"
  if [ ! -e "$lib" ]; then
    echo "   not installed"
    return
  fi
  env OMP_NUM_THREADS="$threads" "$@" "$bin" "$lib"
}
run "OpenBLAS, OpenMP build" "/usr/lib/$ARCH/openblas-openmp/libopenblas.so.0"
run "BLIS, OpenMP build" "/usr/lib/$ARCH/blis-openmp/libblis.so.4"
run "oneMKL $MKL_VERSION (pip wheel)" "$MKL_DIR/lib/libmkl_rt.so.3" \
  MKL_THREADING_LAYER=GNU MKL_INTERFACE_LAYER=LP64 LD_LIBRARY_PATH="$MKL_DIR/lib"
