#!/usr/bin/env bash
# Which BLAS runs the medium workload's GEMMs fastest on this machine (scripts/BENCHMARKS.md,
# "Against PyTorch 2.x"): scripts/bench_blas.c times sgemm_ on those shapes in each library that
# is installed, with the threads every NormLab binary uses (all cores, one OpenMP pool):
#   - OpenBLAS 0.3.21, OpenMP build (libopenblas0-openmp): what NormLab's default build loads
#   - BLIS 0.9.0, OpenMP build (libblis4-openmp: `scripts/setup.sh --blis`), AMD's recommended
#     BLAS for Zen
#   - oneMKL from PyPI (the `mkl` wheel's libraries, unpacked into ~/.cache/normlab/mkl-<version>
#     by `scripts/setup.sh --mkl`), GNU OpenMP threading layer
# It installs nothing: a library that is not installed is reported as such, with the setup.sh
# option that installs it. Run it on an otherwise idle machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"  # NORMLAB_MKL_VERSION, NORMLAB_MKL_PREFIX
if [ $# -gt 0 ]; then
  echo "bench_blas: no arguments (oneMKL and BLIS are installed by scripts/setup.sh --mkl / --blis)" >&2
  exit 2
fi
ARCH="$(gcc -print-multiarch)"
bin="$(mktemp -d)/bench_blas"
trap 'rm -rf "$(dirname "$bin")"' EXIT
gcc -O2 -o "$bin" "$ROOT/scripts/bench_blas.c" -ldl
threads="$(nproc)"
echo "machine: $threads cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

run() {  # NAME LIBRARY INSTALL [ENV...]: INSTALL is the scripts/setup.sh option that installs it
  local name="$1" lib="$2" install="$3"
  shift 3
  echo "== $name ($lib)"
  if [ ! -e "$lib" ]; then
    echo "   not installed: run scripts/setup.sh $install"
    return
  fi
  env OMP_NUM_THREADS="$threads" "$@" "$bin" "$lib"
}
run "OpenBLAS, OpenMP build" "/usr/lib/$ARCH/openblas-openmp/libopenblas.so.0" ""
run "BLIS, OpenMP build" "/usr/lib/$ARCH/blis-openmp/libblis.so.4" --blis
run "oneMKL $NORMLAB_MKL_VERSION (pip wheel)" "$NORMLAB_MKL_PREFIX/lib/libmkl_rt.so.3" --mkl \
  MKL_THREADING_LAYER=GNU MKL_INTERFACE_LAYER=LP64 LD_LIBRARY_PATH="$NORMLAB_MKL_PREFIX/lib"
