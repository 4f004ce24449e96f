# Sourced by the scripts: which LibTorch NormLab builds against and where that build lives.
#   NORMLAB_TORCH unset or "debian"  Debian's libtorch-dev 1.13 (CPU)          build dir: build/
#   NORMLAB_TORCH=pip                the pinned PyTorch wheel below, installed  build dir: build-pip/
#                                    with pip into a folder of NormLab's own
#                                    (CUDA build; its CPU path runs anywhere)
#   NORMLAB_TORCH=/path/to/torch     any LibTorch folder holding share/cmake/Torch (the official
#                                    libtorch zip unpacked, or site-packages/torch of an existing
#                                    PyTorch install)                           build dir: build-libtorch/
# NORMLAB_BUILD_DIR overrides the build dir. Needs ROOT (the repository) set by the caller.
NORMLAB_TORCH_PIP_VERSION=2.11.0   # the GPU machine's PyTorch (scripts/README.md); CUDA 13.0 wheel
NORMLAB_TORCH_PIP_PREFIX="${NORMLAB_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/normlab}/torch-$NORMLAB_TORCH_PIP_VERSION"

case "${NORMLAB_TORCH:-debian}" in
  debian) NORMLAB_TORCH_FAMILY=debian; NORMLAB_TORCH_DIR="" ;;
  pip) NORMLAB_TORCH_FAMILY=pip; NORMLAB_TORCH_DIR="$NORMLAB_TORCH_PIP_PREFIX/torch" ;;
  *) NORMLAB_TORCH_FAMILY=libtorch; NORMLAB_TORCH_DIR="$NORMLAB_TORCH" ;;
esac
# NORMLAB_SANITIZE=1 (scripts/test.sh --sanitize): the ASan + UBSan build, in <build dir>-asan/
# (build-asan/ for Debian's LibTorch).
NORMLAB_SANITIZE_SUFFIX=""
[ "${NORMLAB_SANITIZE:-0}" = 1 ] && NORMLAB_SANITIZE_SUFFIX="-asan"
case "$NORMLAB_TORCH_FAMILY" in
  debian) NORMLAB_BUILD="${NORMLAB_BUILD_DIR:-$ROOT/build$NORMLAB_SANITIZE_SUFFIX}" ;;
  pip) NORMLAB_BUILD="${NORMLAB_BUILD_DIR:-$ROOT/build-pip$NORMLAB_SANITIZE_SUFFIX}" ;;
  *) NORMLAB_BUILD="${NORMLAB_BUILD_DIR:-$ROOT/build-libtorch$NORMLAB_SANITIZE_SUFFIX}" ;;
esac

# The tensorboard Python package (reading event files back in tests/scripts/tensorboard_test.sh;
# `tensorboard --logdir` for users), installed once with pip --target into a folder of NormLab's own.
NORMLAB_TENSORBOARD_VERSION=2.20.0
NORMLAB_TENSORBOARD_PREFIX="${NORMLAB_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/normlab}/tensorboard-$NORMLAB_TENSORBOARD_VERSION"
normlab_install_tensorboard() {
  [ -f "$NORMLAB_TENSORBOARD_PREFIX/.complete" ] && return 0
  echo "normlab setup: pip install tensorboard==$NORMLAB_TENSORBOARD_VERSION into $NORMLAB_TENSORBOARD_PREFIX" >&2
  local tmp="$NORMLAB_TENSORBOARD_PREFIX.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$NORMLAB_TENSORBOARD_PREFIX")"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$tmp" "tensorboard==$NORMLAB_TENSORBOARD_VERSION" >&2
  rm -rf "$NORMLAB_TENSORBOARD_PREFIX"
  mv "$tmp" "$NORMLAB_TENSORBOARD_PREFIX"
  touch "$NORMLAB_TENSORBOARD_PREFIX/.complete"
}

# Installs the pinned wheel (and the nvidia-* wheels it needs, about 4.6 GB) once into
# NORMLAB_TORCH_PIP_PREFIX, never into a Python environment: pip --target, completed atomically.
normlab_install_pip_torch() {
  [ -f "$NORMLAB_TORCH_PIP_PREFIX/.complete" ] && return 0
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "normlab setup: installing python3-pip" >&2
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >&2
  fi
  echo "normlab setup: pip install torch==$NORMLAB_TORCH_PIP_VERSION into $NORMLAB_TORCH_PIP_PREFIX" >&2
  local tmp="$NORMLAB_TORCH_PIP_PREFIX.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$NORMLAB_TORCH_PIP_PREFIX")"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$tmp" "torch==$NORMLAB_TORCH_PIP_VERSION" >&2
  rm -rf "$NORMLAB_TORCH_PIP_PREFIX"
  mv "$tmp" "$NORMLAB_TORCH_PIP_PREFIX"
  touch "$NORMLAB_TORCH_PIP_PREFIX/.complete"
}
