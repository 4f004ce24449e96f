#!/usr/bin/env bash
# Builds NormLab on a GPU machine that has PyTorch in python3 but no package manager and no network
# (scripts/README.md, "gpu_build.sh"; an H100 machine). Debian 12's packages of NormLab's other dependencies,
# downloaded beforehand on a Debian machine with
#   mkdir -p .debs && (cd .debs && apt-get download libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev \
#     libspdlog1.10 libfmt-dev libfmt9 libcli11-dev libgtest-dev libgmock-dev googletest libgloo-dev \
#     libsentencepiece-dev libsentencepiece0 libprotobuf-dev libprotobuf32 libprotobuf-lite32 \
#     protobuf-compiler libprotoc32 libssl-dev libssl3 zlib1g-dev pkgconf pkgconf-bin libpkgconf3 pkg-config)
# (.debs/ is git-ignored; the device tool's `carry` takes it along), are unpacked into a prefix of
# their own, never into /. Then configure against python3's torch and build everything.
#   scripts/gpu_build.sh [cmake --build arguments]      build dir: build-gpu/ (NORMLAB_BUILD_DIR)
# It writes BUILD/env.sh: `source build-gpu/env.sh` sets LD_LIBRARY_PATH for running the binaries.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBS="${NORMLAB_DEBS:-$ROOT/.debs}"
PREFIX="${NORMLAB_DEPS_PREFIX:-/tmp/normlab-deps}"
BUILD="${NORMLAB_BUILD_DIR:-$ROOT/build-gpu}"
if [ ! -f "$PREFIX/.complete" ]; then
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { echo "gpu_build: no .deb files in $DEBS (see the header of $0)" >&2; exit 2; }
  mkdir -p "$PREFIX"
  for f in "$DEBS"/*.deb; do dpkg -x "$f" "$PREFIX"; done
  # The packages' pkg-config files name /usr: point them at the prefix.
  for pc in "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$PREFIX"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" "$pc"
  done
  touch "$PREFIX/.complete"
fi
# pkg-config and protoc from the prefix (the machine may have neither), finding the prefix's files.
export PATH="$PREFIX/usr/bin:$PATH"
export PKG_CONFIG_PATH="$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
TD="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:$TD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DNORMLAB_TORCH="$TD" \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DGTest_DIR="$PREFIX/usr/lib/x86_64-linux-gnu/cmake/GTest" \
    -DNORMLAB_OPENMP_BLAS=OFF >&2
fi
printf 'export LD_LIBRARY_PATH=%q\n' "$LD_LIBRARY_PATH" > "$BUILD/env.sh"
cmake --build "$BUILD" -j "${NORMLAB_JOBS:-$(nproc)}" "$@" >&2
