// The two hazards of building against a pip / zip LibTorch 2.x (third_party/dependencies.cmake).
// Against Debian's LibTorch 1.13 neither can occur and these tests pass trivially; against the pip
// wheel each fails without its fix (README, "LibTorch 2.x and CUDA").
#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "test_util.h"

namespace normlab {
namespace {

// The shared object a function's address resolves into, as the dynamic linker bound it.
std::string library_of(const void* fn) {
  Dl_info info{};
  if (::dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return std::filesystem::path(info.dli_fname).filename().string();
}

// Hazard 1: every NormLab file compiles spdlog's headers against the fmt libspdlog.so was built
// with, not against the newer fmt inside LibTorch's include directory (which comes first on the
// include path unless the build puts spdlog's fmt before it).
TEST(BuildHazards, SpdlogCompilesAgainstTheFmtItWasBuiltWith) {
  const std::string expected = NORMLAB_SPDLOG_FMT_VERSION;  // e.g. "9.1.0", from CMake's fmt package
  const int major = FMT_VERSION / 10000, minor = FMT_VERSION / 100 % 100, patch = FMT_VERSION % 100;
  EXPECT_EQ(std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch), expected);

  // and the compiled library formats what the headers hand it
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("hazard", sink);
  logger.set_pattern("%v");
  logger.info("step {:>4} | loss {:.4f} | {}", 17, 1.23456789, std::string("ok"));
  logger.flush();
  EXPECT_EQ(out.str(), "step   17 | loss 1.2346 | ok\n");
}

// Hazard 2: the wheel's libtorch.so exports its own copies of libstdc++ functions
// (std::filesystem::remove_all among them) without depending on libstdc++.so; a binary that
// searched libtorch.so first bound its calls to those copies and crashed in remove_all.
TEST(BuildHazards, StdFilesystemCallsBindToLibstdcxx) {
  using RemoveAllEc = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&);
  using CreateDirs = bool (*)(const std::filesystem::path&);
  const RemoveAllEc remove_all_ec = &std::filesystem::remove_all;
  const RemoveAll remove_all = &std::filesystem::remove_all;
  const CreateDirs create_directories = &std::filesystem::create_directories;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").filename().string();
  for (const void* fn : {reinterpret_cast<const void*>(remove_all_ec), reinterpret_cast<const void*>(remove_all),
                         reinterpret_cast<const void*>(create_directories)}) {
    // libstdc++.so.6, or this executable itself where the toolchain links libstdc++ statically
    // (the GPU machine's did: then the members must come from libstdc++.a, never from LibTorch)
    const std::string lib = library_of(fn);
    EXPECT_TRUE(lib.rfind("libstdc++.so", 0) == 0 || lib == self) << "bound to " << lib;
  }

  // and the calls work: a nested tree is created and removed
  testing::TempDir tmp;
  const std::filesystem::path root = tmp / "tree";
  std::filesystem::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "file.txt") << "x";
  std::error_code ec;
  EXPECT_EQ(std::filesystem::remove_all(root, ec), 4u) << ec.message();
  EXPECT_FALSE(std::filesystem::exists(root));
}

}  // namespace
}  // namespace normlab
