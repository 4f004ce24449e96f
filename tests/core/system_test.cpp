#include "core/system.h"

#include <gtest/gtest.h>

#include <sstream>

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

// machine.json's CPU: a VM may name two CPU generations alike ("AMD EPYC" for a Zen 4 and a Zen 5)
// is told apart by the x86 family and model numbers; only the first processor's block is read, and
// "model name" is not taken for "model".
TEST(System, TheCpuDescriptionCarriesTheFamilyAndModelNumbers) {
  const auto describe = [](const std::string& text) {
    std::istringstream in(text);
    return cpu_description(in);
  };
  const std::string zen4 =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC\nmodel\t\t: 17\n"
      "stepping\t: 1\nflags\t\t: fpu avx512f\n\nprocessor\t: 1\ncpu family\t: 99\nmodel\t\t: 98\nmodel name\t: other\n";
  const std::string zen5 =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
      "stepping\t: 0\n";
  EXPECT_EQ(describe(zen4), "AMD EPYC (family 25, model 17)");
  EXPECT_EQ(describe(zen5), "AMD EPYC (family 26, model 2)");
  EXPECT_NE(describe(zen4), describe(zen5));
  // No family and model (ARM kernels): the name alone; no name at all: "unknown".
  EXPECT_EQ(describe("Processor\t: AArch64 Processor rev 4 (aarch64)\nBogoMIPS\t: 38.40\n"),
            "AArch64 Processor rev 4 (aarch64)");
  EXPECT_EQ(describe(""), "unknown");
  EXPECT_EQ(describe("\n\nflags\t: fpu\n"), "unknown");
  // This machine: what machine.json records.
  EXPECT_NE(cpu_description(), "");
}

}  // namespace normlab
