// A SentencePiece tokenizer (data/README.md, "Real corpora"): `data.tokenizer` names its model;
// `sample` encodes the prompt and decodes the output with it, `eval` counts the bytes behind the
// evaluated tokens with it (val_bpb), and `normlab tokenize` trains one and encodes text into
// llm.c shards. SentencePiece itself lives in its own shared library (data/spm_shim.cpp says why),
// loaded on first use; this class is the only way in.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

class Tokenizer {
 public:
  // Loads a SentencePiece model file; UsageError naming the file when it is not one.
  static Tokenizer load(const std::string& path);

  int64_t vocab_size() const { return static_cast<int64_t>(bytes_.size()); }
  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // Bytes of text behind token `id`: 1 for a byte-fallback token, 0 for control and unknown
  // tokens, else its piece's UTF-8 length with the whitespace mark counted as one space.
  int64_t token_bytes(int64_t id) const;

  const std::string& path() const { return path_; }
  const std::string& sha256() const { return sha256_; }

 private:
  std::shared_ptr<void> handle_;
  std::vector<int64_t> bytes_;
  std::string path_, sha256_;
};

struct TokenizerTraining {
  std::string input;   // a text file, read line by line
  int64_t vocab = 0;   // pieces, byte fallbacks and <unk> included
  std::string out;     // the model file, written atomically
  int64_t max_lines = 2000000;  // at most this many lines sampled for training
};

// Trains a BPE model with byte fallback (any text encodes, newlines included, and decodes back
// exactly): identity normalisation, no dummy prefix, whitespace kept. UsageError on bad input.
void train_tokenizer(const TokenizerTraining& t);

// Encodes a text file, line by line with each line's newline, into one llm.c shard (uint16 when
// the vocabulary fits, else uint32). Returns the number of tokens written.
int64_t encode_text_file(const Tokenizer& tok, const std::string& input, const std::string& out);

}  // namespace normlab
