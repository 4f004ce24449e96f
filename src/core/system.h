// Facts about the process the trainer acts on: which BLAS is loaded, peak memory.
#pragma once

#include <cstdint>
#include <string>

namespace normlab {

// Resolved path of the libblas/libopenblas library mapped into this process ("" if none).
std::string loaded_blas_library();
// True when the loaded BLAS is Debian's slow reference implementation.
bool reference_blas_loaded();
// How the loaded OpenBLAS runs its GEMMs: "openmp" (on libgomp's workers, the pool LibTorch uses),
// "pthreads" (a pool of its own), "sequential", or "" when no OpenBLAS is loaded.
std::string blas_threading();
// Physical memory of this machine in bytes.
double physical_memory_bytes();
// Peak resident set size in MiB.
double peak_rss_mib();

}  // namespace normlab
