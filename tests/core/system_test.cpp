#include "core/system.h"

#include <gtest/gtest.h>

namespace normlab {

// The build links the OpenMP build of OpenBLAS first (third_party/dependencies.cmake) when it is
// installed; the speed of every GEMM relies on it, and a future LibTorch with a DT_RUNPATH of its
// own would silently bypass the rpath. This catches that.
TEST(System, LoadsTheOpenBlasBuildTheBuildWasConfiguredFor) {
  const std::string threading = blas_threading();
#ifdef NORMLAB_EXPECT_OPENMP_BLAS
  EXPECT_EQ(threading, "openmp") << "loaded BLAS: " << loaded_blas_library();
  EXPECT_NE(loaded_blas_library().find("openblas-openmp"), std::string::npos) << loaded_blas_library();
#else
  GTEST_SKIP() << "built without libopenblas0-openmp; loaded: " << loaded_blas_library() << " ("
               << threading << ")";
#endif
}

TEST(System, ReportsTheLoadedBlasAndPeakMemory) {
  // Debian's LibTorch always loads a BLAS library; a pip or zip LibTorch has MKL linked in.
  if (!at::hasMKL()) {
    EXPECT_FALSE(loaded_blas_library().empty());
  }
  EXPECT_FALSE(reference_blas_loaded()) << loaded_blas_library();
  EXPECT_GT(peak_rss_mib(), 1.0);
}

}  // namespace normlab
