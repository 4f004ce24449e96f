#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root or with sudo) and builds NormLab in build/ (Release).
# Sourced by scripts/train.sh and scripts/test.sh; safe and fast to re-run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKGS=(cmake g++ make ccache libtorch-dev libyaml-cpp-dev libspdlog-dev libcli11-dev libgtest-dev
      libopenblas0-pthread libopenblas0-openmp python3 python3-numpy python3-yaml python3-matplotlib)

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

JOBS="${NORMLAB_JOBS:-$(nproc)}"
BUILD="${NORMLAB_BUILD_DIR:-$ROOT/build}"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$BUILD" -j "$JOBS" "$@" >&2
