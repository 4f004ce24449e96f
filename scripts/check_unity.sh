#!/usr/bin/env bash
# The unity build's one rule (CMakeLists.txt, "Unity build"), checked for every pairing of files at
# once: all of the library's sources as one translation unit and all of the tests' as another,
# syntax only (about a minute on two cores). A clash (two files defining the same name in an
# anonymous namespace, or an overload made ambiguous) is an error here whatever today's batches.
# Usage: scripts/check_unity.sh [build dir, default build/]   (after a build: it uses its flags)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"  # the build's compiler (its PCH)
status=0
for target in lib tests; do
  if [ "$target" = lib ]; then dir="$BUILD/CMakeFiles/normlab_lib.dir"; else dir="$BUILD/tests/CMakeFiles/normlab_tests.dir"; fi
  # Every source that may share a batch (the configure step lists them; today's batches leave some
  # alone, e.g. the files the mutant check patches), all in one file; the flags of the target's own
  # compile (flags.make).
  list="$BUILD/unity_sources_normlab_$target.txt"
  [ -f "$list" ] || { echo "check_unity: $list missing (configure with -DNORMLAB_UNITY=ON first)" >&2; exit 2; }
  sed 's/.*/#include "&"/' "$list" > "$tmp/$target.cpp"
  flags="$(sed -n 's/^CXX_\(DEFINES\|INCLUDES\|FLAGS\) = //p' "$dir/flags.make" | tr '\n' ' ')"
  pch="$BUILD/CMakeFiles/normlab_lib.dir/cmake_pch.hxx"
  # shellcheck disable=SC2086
  if ! eval "$cxx" $flags -Winvalid-pch -include "$pch" -fsyntax-only "$tmp/$target.cpp" 2>"$tmp/$target.log"; then
    echo "check_unity: the $target's sources clash when compiled together:" >&2
    grep -E 'error' "$tmp/$target.log" | sort -u | head -20 >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "check_unity: no clash among the library's or the tests' sources"
exit $status
