#include "data/corpus.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/errors.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(CorpusTest, SequentialOffsetsFollowTheContractFormula) {
  const int64_t N = 1000, ctx = 16, B = 4;
  for (int64_t k : {0, 1, 7, 100}) {
    auto off = batch_offsets(N, ctx, B, k, /*shuffle=*/false, 1);
    ASSERT_EQ(off.size(), 4u);
    for (int64_t r = 0; r < B; ++r) EXPECT_EQ(off[r], ((k * B + r) * ctx) % (N - ctx - 1));
  }
}

TEST(CorpusTest, ShuffledOffsetsAreDeterministicInRangeAndCoverTheCorpus) {
  const int64_t N = 500, ctx = 16, B = 8;
  std::set<int64_t> seen;
  for (int64_t k = 0; k < 1000; ++k) {
    auto a = batch_offsets(N, ctx, B, k, true, 42);
    auto b = batch_offsets(N, ctx, B, k, true, 42);
    EXPECT_EQ(a, b);
    for (int64_t o : a) {
      ASSERT_GE(o, 0);
      ASSERT_LE(o, N - ctx - 1);  // a full ctx + 1 window fits
      seen.insert(o);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(N - ctx));  // every start drawn in 8000 draws of 484
  EXPECT_NE(batch_offsets(N, ctx, B, 0, true, 42), batch_offsets(N, ctx, B, 0, true, 43));
  EXPECT_NE(batch_offsets(N, ctx, B, 0, true, 42), batch_offsets(N, ctx, B, 1, true, 42));
}

TEST(CorpusTest, EvalWindowsAreNonOverlappingAndCapped) {
  EXPECT_EQ(eval_offsets(100, 10, 64), (std::vector<int64_t>{0, 10, 20, 30, 40, 50, 60, 70, 80}));
  EXPECT_EQ(eval_offsets(101, 10, 64).size(), 10u);  // 90 + 11 = 101 fits
  EXPECT_EQ(eval_offsets(100, 10, 3), (std::vector<int64_t>{0, 10, 20}));
  EXPECT_TRUE(eval_offsets(10, 10, 5).empty());
}

TEST(CorpusTest, WindowsHoldInputsAndShiftedTargets) {
  std::vector<uint16_t> toks(50);
  for (int i = 0; i < 50; ++i) toks[i] = static_cast<uint16_t>(i * 3);
  auto c = Corpus::from_tokens(toks);
  auto w = c.windows({5, 20}, 4);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(w[0][0].item<int64_t>(), 15);
  EXPECT_EQ(w[0][4].item<int64_t>(), 27);
  EXPECT_EQ(w[1][0].item<int64_t>(), 60);
}

TEST(CorpusTest, ReadsTextAsBytesAndBinAsLittleEndianUint16) {
  testing::TempDir dir;
  {
    std::ofstream t(dir / "a.txt", std::ios::binary);
    t << "hi\xff";
    std::ofstream b(dir / "a.bin", std::ios::binary);
    const unsigned char bytes[] = {0x01, 0x00, 0x34, 0x12, 0xff, 0xff};
    b.write(reinterpret_cast<const char*>(bytes), sizeof bytes);
  }
  auto t = Corpus::load(dir / "a.txt");
  EXPECT_EQ(t.tokens(), (std::vector<uint16_t>{'h', 'i', 255}));
  auto b = Corpus::load(dir / "a.bin");
  EXPECT_EQ(b.tokens(), (std::vector<uint16_t>{1, 0x1234, 65535}));
  EXPECT_EQ(b.max_token(), 65535);
  EXPECT_THROW(Corpus::load(dir / "missing.txt"), UsageError);
  {
    std::ofstream odd(dir / "odd.bin", std::ios::binary);
    odd << "abc";
  }
  EXPECT_THROW(Corpus::load(dir / "odd.bin"), UsageError);
}

TEST(CorpusTest, ShippedToyCorpusHasItsEntropyFloorBelowUnigramEntropy) {
  auto f = read_entropy_floor(testing::source_dir() + "/data/toy/val.txt");
  ASSERT_TRUE(f.has_value());
  EXPECT_GT(f->floor, 0.3);
  EXPECT_LT(f->floor, f->unigram - 1.0);
  // The unigram entropy in floor.json is the empirical byte entropy of the file: recompute it.
  auto c = Corpus::load(testing::source_dir() + "/data/toy/val.txt");
  std::vector<double> counts(256, 0);
  for (auto t : c.tokens()) counts[t] += 1;
  double h = 0;
  for (double n : counts) {
    if (n > 0) h -= n / c.size() * std::log(n / c.size());
  }
  EXPECT_NEAR(h, f->unigram, 1e-6);
}

}  // namespace
}  // namespace normlab
