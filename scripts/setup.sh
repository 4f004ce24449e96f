#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root or with sudo) and builds NormLab (Release) in the
# build directory of the LibTorch family NORMLAB_TORCH selects (scripts/torch_env.sh: build/ for
# Debian's LibTorch 1.13, the default; build-pip/ for NORMLAB_TORCH=pip). Run by scripts/train.sh
# and scripts/test.sh; safe and fast to re-run. The one script that installs anything.
#   scripts/setup.sh [--plot] [--bench-ref] [--fuzz] [--pip-torch] [cmake --build arguments]
# Optional parts, each installed on top of the default set-up and build:
#   --plot       what scripts/plot.py imports (matplotlib, numpy, PIL)
#   --bench-ref  what scripts/bench_reference.py imports (Debian's PyTorch 1.13, PyYAML, numpy)
#   --fuzz       clang and its fuzzer/sanitizer runtime for tests/fuzz/run_fuzz.sh
#   --pip-torch  the same as NORMLAB_TORCH=pip: the pinned PyTorch wheel (scripts/torch_env.sh),
#                then the build in build-pip/
# Every other argument goes to `cmake --build` (everything after a literal `--` too).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRA_PKGS=()
BUILD_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --plot) EXTRA_PKGS+=(python3-matplotlib python3-numpy python3-pil) ;;
    --bench-ref) EXTRA_PKGS+=(python3-torch python3-yaml python3-numpy) ;;
    --fuzz) EXTRA_PKGS+=(clang libclang-rt-14-dev) ;;
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
# The pinned wheel and the tensorboard package are installed with pip (scripts/torch_env.sh).
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

[ "$NORMLAB_TORCH_FAMILY" = pip ] && normlab_install_pip_torch
normlab_install_tensorboard
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
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNORMLAB_TORCH="$NORMLAB_TORCH_DIR" \
    -DNORMLAB_SANITIZE="$SANITIZE" >&2
fi
cmake --build "$BUILD" -j "$JOBS" "${BUILD_ARGS[@]}" >&2
