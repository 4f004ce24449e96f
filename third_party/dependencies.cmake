# How NormLab finds its dependencies. All come from Debian 12 packages (see VERSIONS.md);
# no foreign source is vendored. Included once from the top-level CMakeLists.txt.

# Two LibTorch families, one code base (README "LibTorch 2.x and CUDA"):
# - default: Debian's libtorch-dev 1.13 (CPU), found in the system prefix;
# - NORMLAB_TORCH=<dir>: any other LibTorch, <dir> holding share/cmake/Torch: the `torch` folder of
#   a `pip install torch` (what scripts/setup.sh does with NORMLAB_TORCH=pip) or the official
#   libtorch zip unpacked. Its prefix goes first, so that neither TorchConfig's Caffe2 package nor
#   its libraries are picked up from Debian's copy in /usr (they were, silently, before).
set(NORMLAB_TORCH "" CACHE PATH "LibTorch to build against (a folder holding share/cmake/Torch); empty: Debian's libtorch-dev")
# A LibTorch named the standard ways (-DTorch_DIR=<torch>/share/cmake/Torch,
# -DCMAKE_PREFIX_PATH=<torch>/share/cmake or <torch>) is taken as NORMLAB_TORCH=<torch> when its
# libraries sit in <torch>/lib (a pip or zip LibTorch): its TorchConfig looks for its Caffe2 package
# and its libraries after CMake's system paths, so with Debian's libtorch-dev installed it silently
# linked Debian's libraries (measured). Debian's own TorchConfig (multiarch lib/) is left alone.
if(NOT NORMLAB_TORCH)
  set(NORMLAB_TORCH_CANDIDATES "")
  if(Torch_DIR)
    list(APPEND NORMLAB_TORCH_CANDIDATES "${Torch_DIR}/../../..")
  endif()
  foreach(p ${CMAKE_PREFIX_PATH})
    list(APPEND NORMLAB_TORCH_CANDIDATES "${p}" "${p}/../..")
  endforeach()
  foreach(c ${NORMLAB_TORCH_CANDIDATES})
    get_filename_component(c "${c}" REALPATH)
    if(EXISTS "${c}/share/cmake/Torch/TorchConfig.cmake" AND EXISTS "${c}/lib/libtorch.so")
      message(STATUS "NormLab: LibTorch named through Torch_DIR/CMAKE_PREFIX_PATH: ${c}")
      set(NORMLAB_TORCH "${c}" CACHE PATH "" FORCE)
      break()
    endif()
  endforeach()
endif()
if(NORMLAB_TORCH)
  get_filename_component(NORMLAB_TORCH "${NORMLAB_TORCH}" REALPATH)
  list(PREPEND CMAKE_PREFIX_PATH "${NORMLAB_TORCH}")
  set(Torch_DIR "${NORMLAB_TORCH}/share/cmake/Torch" CACHE PATH "" FORCE)
endif()
find_package(Torch REQUIRED)
get_filename_component(NORMLAB_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
get_filename_component(NORMLAB_TORCH_LIB_DIR "${NORMLAB_TORCH_LIB_DIR}" REALPATH)
if(NORMLAB_TORCH AND NOT NORMLAB_TORCH_LIB_DIR STREQUAL "${NORMLAB_TORCH}/lib")
  message(FATAL_ERROR "NORMLAB_TORCH=${NORMLAB_TORCH}, but TorchConfig found its libraries in "
                      "${NORMLAB_TORCH_LIB_DIR}: two LibTorch installs would be mixed")
endif()
# A LibTorch with CUDA (TorchConfig lists its CUDA libraries): src/core/torch_compat.h's guard.
if(TORCH_CUDA_LIBRARIES)
  set(NORMLAB_WITH_CUDA ON)
  message(STATUS "NormLab: LibTorch from ${NORMLAB_TORCH_LIB_DIR}, with CUDA")
else()
  set(NORMLAB_WITH_CUDA OFF)
  message(STATUS "NormLab: LibTorch from ${NORMLAB_TORCH_LIB_DIR}, CPU only")
endif()
find_package(yaml-cpp REQUIRED)       # libyaml-cpp-dev 0.7
find_package(spdlog REQUIRED)         # libspdlog-dev 1.10 (built against libfmt-dev 9)
find_package(fmt REQUIRED)            # the fmt libspdlog was built against
find_package(CLI11 REQUIRED)          # libcli11-dev 2.1
find_package(Threads REQUIRED)

# Build hazard 1, fmt: LibTorch 2.x ships its own, newer fmt headers in torch/include/fmt, and its
# include directory comes before /usr/include, so spdlog's headers would be compiled against
# LibTorch's fmt while libspdlog.so was built against Debian's fmt 9 (compile error in
# spdlog/common.h, or worse, a silent ABI mismatch). Adding -I/usr/include does not help (GCC
# ignores -I for system directories), so a folder in the build tree holds only a link to the fmt
# that spdlog was built against, and it comes first on every NormLab include path. LibTorch's own
# headers that mention fmt then see fmt 9 too; none that NormLab includes needs a newer one.
# tests/core/build_hazards_test.cpp checks the fmt version every NormLab file compiles against.
get_target_property(NORMLAB_FMT_INCLUDE fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET NORMLAB_FMT_INCLUDE 0 NORMLAB_FMT_INCLUDE)
set(NORMLAB_FMT_SHADOW "${CMAKE_BINARY_DIR}/spdlog-fmt/include")
file(MAKE_DIRECTORY "${NORMLAB_FMT_SHADOW}")
file(CREATE_LINK "${NORMLAB_FMT_INCLUDE}/fmt" "${NORMLAB_FMT_SHADOW}/fmt" SYMBOLIC)
set(NORMLAB_FMT_VERSION "${fmt_VERSION}")

# Build hazard 2, std::filesystem: the pip wheel's libtorch.so carries (and exports) its own copies
# of libstdc++ functions, std::filesystem::remove_all among them, without linking libstdc++.so
# itself; a binary whose link resolved those calls against libtorch.so bound them to the copies,
# which crash (a call through a null pointer inside libtorch.so's remove_all). The fix: libstdc++
# comes on the link line after NormLab's own code and BEFORE LibTorch's libraries, so the linker
# resolves every libstdc++ symbol NormLab uses there first:
# - shared libstdc++ (Debian, Ubuntu's g++): libstdc++.so.6 becomes a needed library ahead of
#   libtorch*.so, so the dynamic linker finds its definitions first (--no-as-needed keeps it on
#   linkers that default to --as-needed);
# - static libstdc++ (the GPU machine's toolchain: -lstdc++ finds libstdc++.a): the archive members
#   NormLab needs are pulled into the binary while the symbols are still undefined. A -lstdc++
#   before the objects (the first fix) pulled nothing there, and the driver's own -lstdc++ at the end
#   came after libtorch.so had already satisfied the references: the crash came back on that machine.
# tests/core/build_hazards_test.cpp asks dladdr where the calls went.
set(NORMLAB_STDCXX_BEFORE_TORCH "-Wl,--push-state,--no-as-needed" "-lstdc++" "-Wl,--pop-state")

# TorchConfig adds its own compile flags (the C++ ABI) through the imported target.

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
  # CCACHE_BASEDIR: paths inside the checkout are hashed relative to the build directory, so a
  # fresh clone elsewhere (CI's) hits the cache that a build in another clone filled.
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}"
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
# Only where the LibTorch found loads its BLAS dynamically (Debian's libtorch_cpu.so needs
# libblas.so.3); a pip or zip LibTorch has MKL linked in and brings its own OpenMP runtime. Decided
# from the library CMake actually found (however it was found: NORMLAB_TORCH, Torch_DIR or
# CMAKE_PREFIX_PATH), by reading its dynamic section, not from how it was asked for.
find_program(NORMLAB_READELF readelf)
set(NORMLAB_TORCH_LOADS_BLAS OFF)
set(NORMLAB_TORCH_CPU_LIB "${NORMLAB_TORCH_LIB_DIR}/libtorch_cpu.so")
if(NOT EXISTS "${NORMLAB_TORCH_CPU_LIB}")
  set(NORMLAB_TORCH_CPU_LIB "${TORCH_LIBRARY}")  # LibTorch before the libtorch_cpu split
endif()
if(NORMLAB_READELF)
  execute_process(COMMAND ${NORMLAB_READELF} -d "${NORMLAB_TORCH_CPU_LIB}"
                  OUTPUT_VARIABLE NORMLAB_TORCH_DYNAMIC ERROR_QUIET)
  if(NORMLAB_TORCH_DYNAMIC MATCHES "NEEDED[^\n]*\\[lib(open|c)?blas")
    set(NORMLAB_TORCH_LOADS_BLAS ON)
  endif()
elseif(NOT NORMLAB_TORCH AND NORMLAB_TORCH_LIB_DIR MATCHES "^/usr/")
  set(NORMLAB_TORCH_LOADS_BLAS ON)  # no readelf: Debian's LibTorch is the one that loads a BLAS
endif()
message(STATUS "NormLab: ${NORMLAB_TORCH_CPU_LIB} loads a BLAS library dynamically: ${NORMLAB_TORCH_LOADS_BLAS}")
set(NORMLAB_OPENMP_BLAS_DEFAULT ${NORMLAB_TORCH_LOADS_BLAS})
option(NORMLAB_OPENMP_BLAS "prefer Debian's OpenMP build of OpenBLAS when it is installed" ${NORMLAB_OPENMP_BLAS_DEFAULT})
set(NORMLAB_OPENMP_BLAS_DIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp")
if(NORMLAB_OPENMP_BLAS AND NOT NORMLAB_TORCH_LOADS_BLAS)
  message(STATUS "NormLab: NORMLAB_OPENMP_BLAS is on, but the LibTorch found links its BLAS in: ignored")
  set(NORMLAB_BLAS_LINK_OPTIONS "")
elseif(NORMLAB_OPENMP_BLAS AND EXISTS "${NORMLAB_OPENMP_BLAS_DIR}/libopenblas.so.0")
  message(STATUS "NormLab: OpenBLAS OpenMP build from ${NORMLAB_OPENMP_BLAS_DIR}")
  set(NORMLAB_BLAS_LINK_OPTIONS "LINKER:--disable-new-dtags" "LINKER:-rpath,${NORMLAB_OPENMP_BLAS_DIR}")
elseif(NORMLAB_OPENMP_BLAS)
  message(STATUS "NormLab: libopenblas0-openmp not found; the system BLAS alternative is used")
  set(NORMLAB_BLAS_LINK_OPTIONS "")
else()
  message(STATUS "NormLab: NORMLAB_OPENMP_BLAS is off; LibTorch's own BLAS is used")
  set(NORMLAB_BLAS_LINK_OPTIONS "")
endif()
