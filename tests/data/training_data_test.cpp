// Training on token files end to end: every format, several shards, resume across a shard
// boundary, and the tokenizer path through the command line (integration tier).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <filesystem>
#include <fstream>

#include "config/load.h"
#include "core/fs.h"
#include "data/corpus.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;


std::vector<uint32_t> toy_tokens(size_t n) {
  const std::string text = read_file(testing::source_dir() + "/data/toy/train.txt").substr(0, n);
  return std::vector<uint32_t>(text.begin(), text.end());  // the bytes as tokens (unsigned char)
}

std::string raw_bytes(const std::vector<uint32_t>& tokens, int width) {
  std::string out;
  for (uint32_t t : tokens) {
    for (int b = 0; b < width; ++b) out += static_cast<char>(t >> (8 * b));
  }
  return out;
}

std::vector<std::string> loss_texts(const std::string& run) {
  std::vector<std::string> out;
  for (const auto& r : testing::records(run, "train")) out.push_back(r["loss"].as<std::string>());
  for (const auto& r : testing::records(run, "eval")) out.push_back("val " + r["val_loss"].as<std::string>());
  return out;
}

Config small_run(const std::string& out, PathList train) {
  Config c = testing::tiny_config(out);
  c.data.train = std::move(train);
  c.train.steps = 8;
  c.train.checkpoint_every = 4;
  c.eval.every = 4;
  return c;
}

TEST(DataFormatTrainingTest, TheSameTokensInEveryFormatTrainToIdenticalLosses) {
  testing::TempDir dir;
  std::vector<uint32_t> toks = toy_tokens(300000);
  for (unsigned char ch : std::string("\xc3\xa9")) toks.push_back(static_cast<unsigned char>(ch));
  write_file_atomic(dir / "text.txt", std::string(toks.begin(), toks.end()));
  write_llmc_shard(dir / "u16.bin", toks);
  write_file_atomic(dir / "raw16.bin", raw_bytes(toks, 2));
  write_file_atomic(dir / "raw32.tok", raw_bytes(toks, 4));
  // The llm.c uint32 layout by hand (write_llmc_shard picks uint16 for these tokens).
  std::vector<uint32_t> header(256, 0);
  header[0] = kLlmcMagicU32;
  header[1] = kLlmcVersionU32;
  header[2] = static_cast<uint32_t>(toks.size());
  write_file_atomic(dir / "u32.bin", raw_bytes(header, 4) + raw_bytes(toks, 4));

  Config ref = small_run(dir / "text", {dir / "text.txt"});
  ref.data.val = ref.data.train;
  ASSERT_EQ(train(testing::resolved(ref), {}), 0);
  const auto want = loss_texts(dir / "text");
  ASSERT_EQ(want.size(), 8u + 3u);
  for (const auto& [name, format] : {std::pair{"u16.bin", TokenFormat::kAuto}, std::pair{"u32.bin", TokenFormat::kAuto},
                                     std::pair{"raw16.bin", TokenFormat::kU16}, std::pair{"raw32.tok", TokenFormat::kU32}}) {
    Config c = small_run(dir / (std::string("run_") + name), {dir / name});
    c.data.format = format;
    c.data.val = c.data.train;  // data.format applies to both splits
    ASSERT_EQ(train(testing::resolved(c), {}), 0) << name;
    EXPECT_EQ(loss_texts(c.out_dir), want) << name;
  }
}

TEST(DataFormatTrainingTest, ShardsTrainAsTheirConcatenationAndResumeAcrossTheBoundary) {
  testing::TempDir dir;
  const std::vector<uint32_t> toks = toy_tokens(40000);
  // Sequential windows (shuffle off) of 4 x 33 tokens: the batches of updates 0-7 read 0 .. 1056,
  // so a shard boundary at 500 falls inside a window of update 3, and the resume is at update 4.
  write_llmc_shard(dir / "all.bin", toks);
  write_llmc_shard(dir / "s0.bin", {toks.begin(), toks.begin() + 500});
  write_llmc_shard(dir / "s1.bin", {toks.begin() + 500, toks.begin() + 510});
  write_llmc_shard(dir / "s2.bin", {toks.begin() + 510, toks.end()});
  Config one = small_run(dir / "one", {dir / "all.bin"});
  one.data.shuffle = false;
  ASSERT_EQ(train(testing::resolved(one), {}), 0);
  Config sharded = one;
  sharded.out_dir = dir / "sharded";
  sharded.data.train = {dir / "s*.bin"};  // a glob: s0, s1, s2 in sorted order
  const Config rs = testing::resolved(sharded);
  ASSERT_EQ(rs.data.train.size(), 3u);
  ASSERT_EQ(train(rs, {}), 0);
  EXPECT_EQ(loss_texts(dir / "sharded"), loss_texts(dir / "one"));

  // Interrupted after the first update, resumed from a checkpoint, across the boundary.
  Config part = sharded;
  part.out_dir = dir / "part";
  part.data.train = {dir / "s0.bin", dir / "s1.bin", dir / "s2.bin"};  // the same shards as a list
  part.train.checkpoint_every = 3;
  std::atomic<bool> stop{true};
  TrainOptions first;
  first.stop = &stop;
  EXPECT_EQ(train(testing::resolved(part), first), kInterrupted);
  TrainOptions rest;
  rest.resume = true;
  ASSERT_EQ(train(testing::resolved(part), rest), 0);
  const auto a = testing::records(dir / "one", "train"), b = testing::records(dir / "part", "train");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"].as<std::string>(), b[i]["loss"].as<std::string>()) << i;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

// One line on stderr, exit 2, and no run directory.
void expect_refused(const std::string& args, const std::string& out, const std::string& expect) {
  testing::TempDir err;
  const auto r = testing::run_command(testing::normlab_binary() + " train -c " + testing::source_dir() + "/configs/default.yaml --out " +
                                      out + " " + args, err / "stderr");
  EXPECT_EQ(r.status, 2) << args;
  const std::string e = read_file(err / "stderr");
  EXPECT_NE(e.find(expect), std::string::npos) << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
  EXPECT_FALSE(fs::exists(out)) << args;
}

TEST(DataFormatTrainingTest, BadTokenFilesAreOneLineErrorsBeforeAnythingIsWritten) {
  testing::TempDir dir;
  write_file_atomic(dir / "raw.bin", raw_bytes(toy_tokens(5000), 2));
  std::vector<uint32_t> toks = toy_tokens(5000);
  toks[4321] = 256;
  write_llmc_shard(dir / "vocab.bin", toks);
  std::string bad = read_file(dir / "vocab.bin");
  bad.resize(bad.size() - 2);  // one token short of the header's count
  write_file_atomic(dir / "short.bin", bad);
  expect_refused("--set data.train=" + dir / "raw.bin", dir / "r1", "set data.format to u16 or u32");
  expect_refused("--set data.train=" + dir / "vocab.bin", dir / "r2",
                 "holds token 256 at position 4321 (the first one) >= model.vocab_size 256");
  expect_refused("--set data.train=" + dir / "short.bin", dir / "r3", "llm.c header says 5000 tokens");
}

// The tokenizer path of the README's recipe: train a model, encode text, train on the shards with
// data.tokenizer, then eval and sample through it.
TEST(CliTokenizeTest, TrainEncodeTrainEvalAndSampleThroughASentencePieceModel) {
#ifdef NORMLAB_SANITIZE_BUILD
  GTEST_SKIP() << "SentencePiece needs RTLD_DEEPBIND, which AddressSanitizer refuses";
#endif
  testing::TempDir dir;
  const std::string toy = testing::source_dir() + "/data/toy/";
  write_file_atomic(dir / "train.txt", read_file(toy + "train.txt").substr(0, 400000));
  auto r = testing::run_command(testing::normlab_binary() + " tokenize train --input " + dir / "train.txt" + " --vocab 512 --out " +
                                dir / "bpe.model");
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("\"vocab\":512"), std::string::npos) << r.out;
  for (const auto& [in, out] : {std::pair{dir / "train.txt", dir / "train.bin"}, std::pair{toy + "val.txt", dir / "val.bin"}}) {
    r = testing::run_command(testing::normlab_binary() + " tokenize encode --model " + dir / "bpe.model" + " --input " + in + " --out " + out);
    ASSERT_EQ(r.status, 0) << in;
    const YAML::Node j = YAML::Load(r.out);
    EXPECT_GT(j["bytes_per_token"].as<double>(), 1.5) << r.out;  // subwords, not bytes
  }
  // Text read as bytes beside a tokenizer is refused: its bytes are not the tokenizer's ids.
  expect_refused("--set data.tokenizer=" + dir / "bpe.model" + " --set model.vocab_size=512", dir / "bytes_run",
                 "is read as bytes (a text file), not as the tokenizer's ids");
  const std::string run = dir / "run";
  r = testing::run_command(testing::normlab_binary() + " train -c " + testing::source_dir() + "/configs/default.yaml --out " + run +
                           " --set data.train=" + dir / "train.bin" + " --set data.val=" + dir / "val.bin" +
                           " --set data.tokenizer=" + dir / "bpe.model" +
                           " --set model.vocab_size=512 --set model.n_layers=2 --set model.d_model=64"
                           " --set model.ctx=64 --set train.steps=60 --set train.batch_size=8 --set train.threads=1"
                           " --set eval.every=30 --set eval.max_windows=16 --set optim.warmup=10");
  ASSERT_EQ(r.status, 0);
  const auto ev = testing::records(run, "eval");
  ASSERT_EQ(ev.size(), 3u);
  // At step 0 the model is near uniform: val_loss ~ ln 512, and bits per byte follow from the
  // tokens' byte count, about 2-4 bytes per token here.
  EXPECT_NEAR(ev[0]["val_loss"].as<double>(), std::log(512.0), 0.3);
  for (const auto& e : ev) {
    const double bpb = e["val_bpb"].as<double>();
    EXPECT_GT(bpb, 0.3);
    EXPECT_LT(bpb, e["val_loss"].as<double>() / std::log(2.0));  // more than one byte per token
  }
  EXPECT_LT(ev[2]["val_bpb"].as<double>(), ev[0]["val_bpb"].as<double>() - 0.3);  // it learns
  // eval: bpb = loss * tokens / (bytes * ln 2), bytes those behind the predicted tokens.
  r = testing::run_command(testing::normlab_binary() + " eval --run " + run);
  ASSERT_EQ(r.status, 0);
  const YAML::Node j = YAML::Load(r.out);
  EXPECT_NEAR(j["bpb"].as<double>(),
              j["loss"].as<double>() * j["tokens"].as<double>() / (j["bytes"].as<double>() * std::log(2.0)), 1e-9);
  EXPECT_NEAR(j["bpb"].as<double>(), ev[2]["val_bpb"].as<double>(), 1e-6);
  // The checkpoint records the tokenizer; sample prints decoded text.
  const auto meta = checkpoint_metadata(find_checkpoint(run, std::nullopt));
  EXPECT_EQ(meta.at("tokenizer"), dir / "bpe.model");
  EXPECT_EQ(meta.at("tokenizer_sha256").size(), 64u);
  r = testing::run_command(testing::normlab_binary() + " sample --run " + run + " --prompt 'c: hello|' --max-new 40 --temperature 0");
  ASSERT_EQ(r.status, 0);
  EXPECT_GT(r.out.size(), 20u) << r.out;  // 40 subword tokens are more than 20 bytes of text
  EXPECT_FALSE(std::regex_search(r.out, std::regex("<[0-9]+>"))) << r.out;  // text, not token ids
  EXPECT_TRUE(valid_utf8(r.out)) << r.out;
  // A changed tokenizer file is refused rather than decoding garbage.
  std::ofstream(dir / "bpe.model", std::ios::app) << "x";
  testing::TempDir err;
  r = testing::run_command(testing::normlab_binary() + " sample --run " + run + " --prompt 'c: a|' --max-new 3", err / "e");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(read_file(err / "e").find("the tokenizer changed since"), std::string::npos) << read_file(err / "e");
}

}  // namespace
}  // namespace normlab
