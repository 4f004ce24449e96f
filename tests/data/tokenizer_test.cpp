#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "data/corpus.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

// One BPE model for the suite, trained on the first 200 KB of the toy corpus plus a line of
// non-ASCII text, so byte fallback and multi-byte pieces both occur.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#ifdef NORMLAB_SANITIZE_BUILD
    return;
#endif
    dir_ = new testing::TempDir();
    text_ = read_file(testing::source_dir() + "/data/toy/train.txt").substr(0, 200000);
    text_ += "w: café naïve über 東京\n";
    write_file_atomic(*dir_ / "text.txt", text_);
    train_tokenizer({*dir_ / "text.txt", 400, *dir_ / "bpe.model"});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
#ifdef NORMLAB_SANITIZE_BUILD
    GTEST_SKIP() << "SentencePiece needs RTLD_DEEPBIND, which AddressSanitizer refuses";
#endif
  }
  static testing::TempDir* dir_;
  static std::string text_;
};
testing::TempDir* TokenizerTest::dir_ = nullptr;
std::string TokenizerTest::text_;

TEST_F(TokenizerTest, TrainsTheRequestedVocabularyAndRecordsItsHash) {
  const Tokenizer t = Tokenizer::load(*dir_ / "bpe.model");
  EXPECT_EQ(t.vocab_size(), 400);
  EXPECT_TRUE(fs::exists(*dir_ / "bpe.vocab"));
  EXPECT_EQ(t.sha256(), sha256_hex(read_file(*dir_ / "bpe.model")));
  EXPECT_EQ(t.sha256().size(), 64u);
  // Subword pieces, not bytes: 400 pieces take the toy text at about 1.46 bytes per token.
  const auto ids = t.encode(text_.substr(0, 20000));
  EXPECT_LT(ids.size(), 20000u * 4 / 5);
}

TEST_F(TokenizerTest, DecodeInvertsEncodeAndTokenBytesAddUpToTheText) {
  const Tokenizer t = Tokenizer::load(*dir_ / "bpe.model");
  for (const std::string& s : {std::string("c: hello world|\nr: dlrow|\n"), std::string("  two  spaces\tand a tab\n"),
                              std::string("w: café naïve über 東京 ☃ \x01\x7f")}) {
    const auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    int64_t bytes = 0;
    for (int64_t id : ids) bytes += t.token_bytes(id);
    EXPECT_EQ(bytes, static_cast<int64_t>(s.size())) << s;
  }
  EXPECT_THROW(t.decode({400}), UsageError);
}

TEST_F(TokenizerTest, EncodeTextFileWritesAnLlmcShardOfTheWholeText) {
  const Tokenizer t = Tokenizer::load(*dir_ / "bpe.model");
  const std::string text = "c: abc|\nk: x=1;x?1\nno newline at the end";
  write_file_atomic(*dir_ / "small.txt", text);
  const int64_t n = encode_text_file(t, *dir_ / "small.txt", *dir_ / "small.bin");
  const Corpus c = Corpus::load(*dir_ / "small.bin");  // auto: the llm.c header
  EXPECT_EQ(c.files()[0].format, TokenFormat::kLlmc);
  EXPECT_EQ(c.files()[0].width, 2);
  ASSERT_EQ(c.size(), n);
  EXPECT_EQ(t.decode(c.slice(0, c.size())), text);
}

TEST_F(TokenizerTest, BadModelsAndInputsAreUsageErrors) {
  write_file_atomic(*dir_ / "junk.model", "not a model");
  EXPECT_THROW(Tokenizer::load(*dir_ / "junk.model"), UsageError);
  EXPECT_THROW(Tokenizer::load(*dir_ / "missing.model"), UsageError);
  EXPECT_THROW(train_tokenizer({*dir_ / "missing.txt", 400, *dir_ / "x.model"}), UsageError);
  // More pieces than the text can make: SentencePiece's own message, and no model file appears.
  write_file_atomic(*dir_ / "tiny.txt", "ab\n");
  EXPECT_THROW(train_tokenizer({*dir_ / "tiny.txt", 5000, *dir_ / "tiny.model"}), UsageError);
  EXPECT_FALSE(fs::exists(*dir_ / "tiny.model"));
}

}  // namespace
}  // namespace normlab
