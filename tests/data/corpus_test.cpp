#include "data/corpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "core/errors.h"
#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

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
  std::vector<uint32_t> toks(50);
  for (int i = 0; i < 50; ++i) toks[i] = static_cast<uint32_t>(i * 3);
  auto c = Corpus::from_tokens(toks);
  auto w = c.windows({5, 20}, 4);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(w[0][0].item<int64_t>(), 15);
  EXPECT_EQ(w[0][4].item<int64_t>(), 27);
  EXPECT_EQ(w[1][0].item<int64_t>(), 60);
}

// Raw bytes of tokens, little-endian, `width` bytes each.
std::string le_bytes(const std::vector<uint32_t>& tokens, int width) {
  std::string out;
  for (uint32_t t : tokens) {
    for (int b = 0; b < width; ++b) out += static_cast<char>(t >> (8 * b));
  }
  return out;
}

// An llm.c shard by hand (not through write_llmc_shard): header of 256 int32, then the tokens.
std::string llmc_bytes(const std::vector<uint32_t>& tokens, int32_t magic, int32_t version, int width,
                       int64_t count_in_header = -1) {
  std::vector<uint32_t> header(256, 0);
  header[0] = static_cast<uint32_t>(magic);
  header[1] = static_cast<uint32_t>(version);
  header[2] = static_cast<uint32_t>(count_in_header < 0 ? static_cast<int64_t>(tokens.size()) : count_in_header);
  return le_bytes(header, 4) + le_bytes(tokens, width);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CorpusTest, ReadsTextAsBytesAndHeaderlessFilesInTheirNamedWidth) {
  testing::TempDir dir;
  write_bytes(dir / "a.txt", "hi\xff");
  write_bytes(dir / "a.bin", le_bytes({1, 0x1234, 65535}, 2));
  write_bytes(dir / "w.bin", le_bytes({1, 0x12345678, 65536}, 4));
  auto t = Corpus::load(dir / "a.txt");
  EXPECT_EQ(t.slice(0, t.size()), (std::vector<int64_t>{'h', 'i', 255}));
  EXPECT_TRUE(t.tokens_are_bytes());
  auto b = Corpus::load(dir / "a.bin", TokenFormat::kU16);
  EXPECT_EQ(b.slice(0, b.size()), (std::vector<int64_t>{1, 0x1234, 65535}));
  EXPECT_FALSE(b.tokens_are_bytes());
  auto w = Corpus::load(dir / "w.bin", TokenFormat::kU32);
  EXPECT_EQ(w.slice(0, w.size()), (std::vector<int64_t>{1, 0x12345678, 65536}));
  // The same file read as u16 is another stream: the format is never guessed for a .bin.
  EXPECT_EQ(Corpus::load(dir / "w.bin", TokenFormat::kU16).size(), 6);
  EXPECT_THROW(Corpus::load(dir / "missing.txt"), UsageError);
  write_bytes(dir / "odd.bin", "abc");
  EXPECT_NE(error_of([&] { Corpus::load(dir / "odd.bin", TokenFormat::kU16); }).find("not a whole number of 2-byte"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Corpus::load(dir / "a.bin", TokenFormat::kU32); }).find("4-byte"), std::string::npos);
}

TEST(CorpusTest, AutoRefusesAHeaderlessBinAndAsksForItsWidth) {
  testing::TempDir dir;
  write_bytes(dir / "train.bin", le_bytes({1, 2, 3, 4}, 2));
  const std::string e = error_of([&] { Corpus::load(dir / "train.bin"); });
  EXPECT_NE(e.find(dir / "train.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("data.format to u16 or u32"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);  // one line
}

TEST(CorpusTest, LlmcShardsOfBothWidthsAndRawFilesGiveTheSameTokens) {
  testing::TempDir dir;
  std::vector<uint32_t> toks(1000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint32_t>((i * 7919) % 50257);
  write_bytes(dir / "s16.bin", llmc_bytes(toks, kLlmcMagicU16, kLlmcVersionU16, 2));
  write_bytes(dir / "s32.bin", llmc_bytes(toks, kLlmcMagicU32, kLlmcVersionU32, 4));
  write_bytes(dir / "raw16.bin", le_bytes(toks, 2));
  write_bytes(dir / "raw32.dat", le_bytes(toks, 4));
  const std::vector<int64_t> want(toks.begin(), toks.end());
  for (const auto& [file, fmt] : {std::pair{"s16.bin", TokenFormat::kAuto}, std::pair{"s16.bin", TokenFormat::kLlmc},
                                  std::pair{"s32.bin", TokenFormat::kAuto}, std::pair{"raw16.bin", TokenFormat::kU16},
                                  std::pair{"raw32.dat", TokenFormat::kU32}}) {
    const Corpus c = Corpus::load(dir / file, fmt);
    EXPECT_EQ(c.slice(0, c.size()), want) << file;
  }
  EXPECT_EQ(Corpus::load(dir / "s16.bin").files()[0].format, TokenFormat::kLlmc);
  EXPECT_EQ(Corpus::load(dir / "s32.bin").files()[0].width, 4);
  // The llm.c magic is recognised whatever the file is called.
  fs::copy_file(dir / "s16.bin", dir / "shard.tokens");
  EXPECT_EQ(Corpus::load(dir / "shard.tokens").slice(0, 1000), want);
}

TEST(CorpusTest, LlmcHeadersThatDoNotFitTheFileAreOneLineErrors) {
  testing::TempDir dir;
  const std::vector<uint32_t> toks{5, 6, 7};
  write_bytes(dir / "count.bin", llmc_bytes(toks, kLlmcMagicU16, kLlmcVersionU16, 2, /*count=*/4));
  std::string e = error_of([&] { Corpus::load(dir / "count.bin"); });
  EXPECT_NE(e.find("header says 4 tokens of 2 bytes (1032 bytes with the header) but the file has 1030 bytes"),
            std::string::npos) << e;
  write_bytes(dir / "version.bin", llmc_bytes(toks, kLlmcMagicU32, 1, 4));
  e = error_of([&] { Corpus::load(dir / "version.bin"); });
  EXPECT_NE(e.find("magic 20240801 has version 1; expected 7"), std::string::npos) << e;
  write_bytes(dir / "plain.bin", le_bytes(toks, 2));
  e = error_of([&] { Corpus::load(dir / "plain.bin", TokenFormat::kLlmc); });
  EXPECT_NE(e.find("not an llm.c shard"), std::string::npos) << e;
  write_bytes(dir / "short.bin", le_bytes({static_cast<uint32_t>(kLlmcMagicU16), 1, 0}, 4));  // header cut short
  e = error_of([&] { Corpus::load(dir / "short.bin"); });
  EXPECT_NE(e.find("not an llm.c shard"), std::string::npos) << e;
}

TEST(CorpusTest, WriteLlmcShardPicksTheNarrowestWidthAndReadsBack) {
  testing::TempDir dir;
  write_llmc_shard(dir / "a.bin", {0, 65535, 3});
  EXPECT_EQ(fs::file_size(dir / "a.bin"), 1024u + 3 * 2);
  EXPECT_EQ(Corpus::load(dir / "a.bin").slice(0, 3), (std::vector<int64_t>{0, 65535, 3}));
  write_llmc_shard(dir / "b.bin", {0, 65536, 128255});
  EXPECT_EQ(fs::file_size(dir / "b.bin"), 1024u + 3 * 4);
  EXPECT_EQ(Corpus::load(dir / "b.bin").slice(0, 3), (std::vector<int64_t>{0, 65536, 128255}));
  // What write_llmc_shard wrote is what a hand-built header says.
  EXPECT_EQ(read_file(dir / "b.bin"), llmc_bytes({0, 65536, 128255}, kLlmcMagicU32, kLlmcVersionU32, 4));
}

TEST(CorpusTest, SeveralFilesAreOneStreamAndWindowsCrossShardBoundaries) {
  testing::TempDir dir;
  std::vector<uint32_t> all(300);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i * 3 + 1);
  // 100 tokens, an empty shard, 1 token, 199 tokens: boundaries at 100 and 101.
  write_llmc_shard(dir / "s0.bin", {all.begin(), all.begin() + 100});
  write_bytes(dir / "s1.bin", llmc_bytes({}, kLlmcMagicU16, kLlmcVersionU16, 2));
  write_llmc_shard(dir / "s2.bin", {all.begin() + 100, all.begin() + 101});
  write_llmc_shard(dir / "s3.bin", {all.begin() + 101, all.end()});
  const Corpus c = Corpus::load({dir / "s0.bin", dir / "s1.bin", dir / "s2.bin", dir / "s3.bin"});
  ASSERT_EQ(c.size(), 300);
  EXPECT_EQ(c.files().size(), 4u);
  const Corpus ref = Corpus::from_tokens(all);
  for (int64_t off : {0, 90, 95, 99, 100, 101, 150, 300 - 17}) {
    EXPECT_TRUE(torch::equal(c.windows({off}, 16), ref.windows({off}, 16))) << "offset " << off;
  }
  for (int64_t i : {0, 99, 100, 101, 299}) EXPECT_EQ(c.token(i), static_cast<int64_t>(all[i]));
  // Batches of the stream are the batches of the concatenated tokens.
  for (int64_t k : {0, 5, 31}) {
    const auto off = batch_offsets(c.size(), 16, 8, k, true, 7);
    EXPECT_TRUE(torch::equal(c.windows(off, 16), ref.windows(off, 16)));
  }
  EXPECT_NE(c.name().find("+ 3 more"), std::string::npos);
}

TEST(CorpusTest, TheFirstTokenOutsideTheVocabularyNamesItsFileAndPosition) {
  testing::TempDir dir;
  write_llmc_shard(dir / "a.bin", {1, 2, 3});
  write_llmc_shard(dir / "b.bin", {4, 9, 5, 12});
  const Corpus c = Corpus::load({dir / "a.bin", dir / "b.bin"});
  EXPECT_FALSE(c.first_token_at_or_above(13).has_value());
  const auto bad = c.first_token_at_or_above(9);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->path, dir / "b.bin");
  EXPECT_EQ(bad->position, 1);
  EXPECT_EQ(bad->token, 9);
}

// Resident memory of this process in KiB (VmRSS).
int64_t rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

TEST(CorpusTest, TokenFilesAreMappedNotReadIntoMemory) {
  testing::TempDir dir;
  // A 2 GiB sparse file of u16 tokens (all zero but the last two): reading it into memory would add
  // 2 GiB of resident memory and take seconds; mapping it costs address space only.
  const std::string path = dir / "big.bin";
  const int64_t bytes = int64_t{2} << 30;
  {
    std::ofstream f(path, std::ios::binary);
    f.seekp(bytes - 4);
    f << le_bytes({7, 65534}, 2);
  }
  ASSERT_EQ(static_cast<int64_t>(fs::file_size(path)), bytes);
  const int64_t before = rss_kib();
  const Corpus c = Corpus::load(path, TokenFormat::kU16);
  ASSERT_EQ(c.size(), bytes / 2);
  EXPECT_EQ(c.token(c.size() - 1), 65534);
  EXPECT_EQ(c.slice(c.size() - 3, 3), (std::vector<int64_t>{0, 7, 65534}));
  auto w = c.windows({0, c.size() / 2, c.size() - 9}, 8);
  EXPECT_EQ(w[2][8].item<int64_t>(), 65534);
  EXPECT_LT(rss_kib() - before, 64 * 1024) << "resident memory grew by more than 64 MiB";
}

TEST(CorpusTest, ShippedToyCorpusHasItsEntropyFloorBelowUnigramEntropy) {
  auto f = read_entropy_floor(testing::source_dir() + "/data/toy/val.txt");
  ASSERT_TRUE(f.has_value());
  EXPECT_GT(f->floor, 0.3);
  EXPECT_LT(f->floor, f->unigram - 1.0);
  // The unigram entropy in floor.json is the empirical byte entropy of the file: recompute it.
  auto c = Corpus::load(testing::source_dir() + "/data/toy/val.txt");
  std::vector<double> counts(256, 0);
  for (int64_t t : c.slice(0, c.size())) counts[t] += 1;
  double h = 0;
  for (double n : counts) {
    if (n > 0) h -= n / c.size() * std::log(n / c.size());
  }
  EXPECT_NEAR(h, f->unigram, 1e-6);
}

}  // namespace
}  // namespace normlab
