# How NormLab finds its dependencies. All come from Debian 12 packages (see VERSIONS.md);
# no foreign source is vendored. Included once from the top-level CMakeLists.txt.

find_package(Torch REQUIRED)          # libtorch-dev 1.13 (TorchConfig.cmake)
find_package(yaml-cpp REQUIRED)       # libyaml-cpp-dev 0.7
find_package(spdlog REQUIRED)         # libspdlog-dev 1.10 (bundles fmt)
find_package(CLI11 REQUIRED)          # libcli11-dev 2.1
find_package(Threads REQUIRED)

# Debian's TorchConfig adds its own compile flags through TORCH_CXX_FLAGS; they are carried by
# the imported target, so nothing else is needed here.

# yaml-cpp 0.7's package config exports the target "yaml-cpp" (no namespace).
if(NOT TARGET yaml-cpp)
  message(FATAL_ERROR "yaml-cpp target not found: install libyaml-cpp-dev")
endif()

# ccache when present: LibTorch headers make every compile expensive.
# Every file is compiled against the precompiled LibTorch header, which ccache only caches with
# the pch sloppiness (and -fpch-preprocess); without it all those compiles count as uncacheable
# and any CMake re-run (a new source file) rebuilds everything from scratch.
find_program(NORMLAB_CCACHE ccache)
if(NORMLAB_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      ${NORMLAB_CCACHE})
  add_compile_options(-fpch-preprocess)
endif()

# One thread pool: Debian's OpenMP build of OpenBLAS (libopenblas0-openmp) runs its GEMMs on the
# same libgomp workers as LibTorch's elementwise ops and NormLab's kernels, so the two never
# compete for the cores (the pthread build, the system default, keeps a second pool of its own).
# The system's libblas.so.3 alternative is left alone; only NormLab's binaries look in the OpenMP
# build's directory first, through an old-style DT_RPATH: unlike DT_RUNPATH it also applies to the
# libraries LibTorch itself loads (libblas.so.3, liblapack.so.3, libopenblas.so.0). Without the
# package NormLab uses whatever the alternative points to and its start-up sets a thread policy for
# two pools instead (src/cli/main.cpp). Measured on the tiny benchmark: 27.4k against 25.7k tokens/s
# (median of 4 interleaved runs each).
option(NORMLAB_OPENMP_BLAS "prefer Debian's OpenMP build of OpenBLAS when it is installed" ON)
set(NORMLAB_OPENMP_BLAS_DIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp")
if(NORMLAB_OPENMP_BLAS AND EXISTS "${NORMLAB_OPENMP_BLAS_DIR}/libopenblas.so.0")
  message(STATUS "NormLab: OpenBLAS OpenMP build from ${NORMLAB_OPENMP_BLAS_DIR}")
  set(NORMLAB_BLAS_LINK_OPTIONS "LINKER:--disable-new-dtags" "LINKER:-rpath,${NORMLAB_OPENMP_BLAS_DIR}")
else()
  message(STATUS "NormLab: libopenblas0-openmp not found; the system BLAS alternative is used")
  set(NORMLAB_BLAS_LINK_OPTIONS "")
endif()
