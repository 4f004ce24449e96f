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
