#include "core/fs.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/errors.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

TEST(AppendFileTest, AWriteOnAFullDiskThrowsNamingTheFile) {
  AppendFile f("/dev/full");  // every write fails with ENOSPC
  try {
    f.append("{\"kind\":\"train\"}\n");
    FAIL() << "no error";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write /dev/full: No space left on device"), std::string::npos)
        << e.what();
  }
}

// A file size limit lets the record start and fails it half-way: the half must not stay.
TEST(AppendFileTest, ARecordCutShortIsRemovedSoNoTornLineRemains) {
  testing::TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  struct rlimit lim = old;
  lim.rlim_cur = 150;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  bool threw = false;
  {
    AppendFile f(path);
    f.append(std::string(99, 'a') + "\n");
    try {
      f.append(std::string(99, 'b') + "\n");  // 50 bytes fit, then EFBIG
    } catch (const RuntimeFailure& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("File too large"), std::string::npos) << e.what();
    }
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_file(path), std::string(99, 'a') + "\n");
}

TEST(ReplaceDirectoryTest, SwapsTheCompleteDirectoryIn) {
  testing::TempDir dir;
  fs::create_directories(dir / "to");
  fs::create_directories(dir / "from");
  testing::write_text(dir / "to/state.json", "old");
  testing::write_text(dir / "to/only_old", "x");
  testing::write_text(dir / "from/state.json", "new");
  replace_directory(dir / "from", dir / "to");
  EXPECT_EQ(read_file(dir / "to/state.json"), "new");
  EXPECT_FALSE(fs::exists(dir / "to/only_old"));
  EXPECT_FALSE(fs::exists(dir / "from"));
  // Where there is nothing to replace it is a plain rename.
  fs::create_directories(dir / "fresh_from");
  replace_directory(dir / "fresh_from", dir / "fresh");
  EXPECT_TRUE(fs::is_directory(dir / "fresh"));
}

// A reader polling the directory must never find it missing or empty while it is replaced
// again and again (deleting the old copy first and renaming after leaves such a moment).
TEST(ReplaceDirectoryTest, ReadersNeverSeeTheDirectoryMissing) {
  testing::TempDir dir;
  const std::string to = dir / "step_00000010";
  fs::create_directories(to);
  testing::write_text(to + "/state.json", "0");
  std::atomic<bool> done{false};
  std::atomic<int> missing{0};
  std::thread reader([&] {
    while (!done.load()) {
      if (!fs::exists(to + "/state.json")) ++missing;
    }
  });
  for (int i = 1; i <= 300; ++i) {
    const std::string tmp = dir / ".step_00000010.tmp";
    fs::create_directories(tmp);
    testing::write_text(tmp + "/state.json", std::to_string(i));
    replace_directory(tmp, to);
  }
  done = true;
  reader.join();
  EXPECT_EQ(missing.load(), 0);
  EXPECT_EQ(read_file(to + "/state.json"), "300");
}

TEST(RemoveStaleTemporariesTest, RemovesOnlyWhatAnInterruptedAtomicWriteLeaves) {
  testing::TempDir dir;
  for (const char* f : {"LATEST", "LATEST.tmp.4242", "config.yaml.tmp.7", "notes.tmp", "x.tmp.12ab"}) {
    testing::write_text(dir / f, "x");
  }
  remove_stale_temporaries(dir.path());
  EXPECT_TRUE(fs::exists(dir / "LATEST"));
  EXPECT_FALSE(fs::exists(dir / "LATEST.tmp.4242"));
  EXPECT_FALSE(fs::exists(dir / "config.yaml.tmp.7"));
  EXPECT_TRUE(fs::exists(dir / "notes.tmp"));
  EXPECT_TRUE(fs::exists(dir / "x.tmp.12ab"));
}

TEST(DirectoryLockTest, ASecondHolderIsRefusedUntilTheFirstReleases) {
  testing::TempDir dir;
  const std::string path = dir / "run.lock";
  {
    DirectoryLock first(path, "busy");
    try {
      DirectoryLock second(path, "run: another writer");
      FAIL() << "second lock taken";
    } catch (const UsageError& e) {
      EXPECT_STREQ(e.what(), "run: another writer");
    }
  }
  EXPECT_NO_THROW(DirectoryLock again(path, "busy"));
}

// The waiting form (sweep processes sharing summary.lock): it blocks while another holder has
// the lock and takes it once released.
TEST(DirectoryLockTest, TheWaitingFormWaitsForTheHolder) {
  testing::TempDir dir;
  const std::string path = dir / "summary.lock";
  auto first = std::make_unique<DirectoryLock>(path, "busy");
  std::atomic<bool> taken{false};
  std::thread waiter([&] {
    DirectoryLock second(path);
    taken = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(taken.load());
  first.reset();
  waiter.join();
  EXPECT_TRUE(taken.load());
}

}  // namespace
}  // namespace normlab
