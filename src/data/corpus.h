// Token corpora and batching (data/README.md). A corpus is one or more token files read as one
// stream in order; each file is memory-mapped (a multi-GB shard costs address space, not RAM)
// and read in its format: bytes (a text file's bytes are its tokens), headerless little-endian
// uint16 / uint32, or an llm.c shard (256-int32 header, then uint16 or uint32 tokens). Batch
// offsets are a pure function of (seed, micro-batch index, row), so a resumed run needs only the
// number of micro-batches consumed to continue exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

// The llm.c shard header (256 little-endian int32: magic, version, token count, then zeros).
constexpr int64_t kLlmcHeaderBytes = 256 * 4;
constexpr int32_t kLlmcMagicU16 = 20240520, kLlmcVersionU16 = 1;
constexpr int32_t kLlmcMagicU32 = 20240801, kLlmcVersionU32 = 7;

// One file's tokens as read: where they start in the mapping and how wide each is.
struct TokenFile {
  std::string path;
  TokenFormat format = TokenFormat::kBytes;  // as read: bytes, u16, u32 or llmc (never auto)
  int width = 1;                             // bytes per token: 1, 2 or 4
  int64_t count = 0;                         // tokens
  const unsigned char* tokens = nullptr;     // the first token
  std::shared_ptr<const void> storage;       // keeps the mapping (or an in-memory buffer) alive
};

// The first token at or above a vocabulary size: which file, which position in it.
struct TokenOutOfRange {
  std::string path;
  int64_t position = 0;  // index of the token within its file
  int64_t token = 0;
};

class Corpus {
 public:
  // Maps each file and reads its format (`auto`: an llm.c header by its magic, else bytes for a
  // file whose name does not end in .bin). Throws UsageError naming the file on a missing file, a
  // headerless .bin under auto, a bad header, or a size that does not fit the format.
  static Corpus load(const std::vector<std::string>& paths, TokenFormat format = TokenFormat::kAuto);
  static Corpus load(const std::string& path, TokenFormat format = TokenFormat::kAuto) {
    return load(std::vector<std::string>{path}, format);
  }
  static Corpus from_tokens(std::vector<uint32_t> tokens, std::string name = "<memory>");

  int64_t size() const { return size_; }
  const std::vector<TokenFile>& files() const { return files_; }
  // "a.txt", or "a.bin + 3 more" for a stream of several files.
  std::string name() const;
  // True when every file is read as bytes: each token is one byte of text (val_bpb = loss / ln 2).
  bool tokens_are_bytes() const;

  // Token i of the stream; tokens n .. n+count-1 into out (a window may span files).
  int64_t token(int64_t i) const;
  void copy(int64_t begin, int64_t count, int64_t* out) const;
  std::vector<int64_t> slice(int64_t begin, int64_t count) const;

  // Scans every token once; nullopt when all are below `limit`.
  std::optional<TokenOutOfRange> first_token_at_or_above(int64_t limit) const;

  // (rows, ctx + 1) int64 windows starting at the given offsets.
  torch::Tensor windows(const std::vector<int64_t>& offsets, int64_t ctx) const;

 private:
  std::vector<TokenFile> files_;
  std::vector<int64_t> starts_;  // stream index of each file's first token
  int64_t size_ = 0;
};

// The format one file would be read in, and why not when it cannot be (the one-line error).
TokenFile map_token_file(const std::string& path, TokenFormat format);

// Writes tokens as an llm.c shard: uint16 (magic 20240520, version 1) when every token is below
// 65536, else uint32 (magic 20240801, version 7); atomically (temporary name, then rename).
void write_llmc_shard(const std::string& path, const std::vector<uint32_t>& tokens);

// Start offsets of micro-batch `k` (global index, counting every micro-batch of every update):
// shuffle: uniform in [0, N - ctx - 1] from (seed, k, r); else ((k*B + r) * ctx) mod (N - ctx - 1).
std::vector<int64_t> batch_offsets(int64_t corpus_size, int64_t ctx, int64_t batch_size, int64_t k,
                                   bool shuffle, uint64_t seed);

// Evaluation windows: offsets 0, ctx, 2ctx, ... while ctx + 1 tokens fit, at most max_windows.
std::vector<int64_t> eval_offsets(int64_t corpus_size, int64_t ctx, int64_t max_windows);

// The generator's entropy floor and unigram entropy (nats/token) for a data file, read from
// floor.json next to it (written by scripts/make_toy_corpus.py). nullopt when there is none.
struct EntropyFloor {
  double floor = 0;
  double unigram = 0;
};
std::optional<EntropyFloor> read_entropy_floor(const std::string& data_path);
// The unigram entropy (nats per token) of a data file: floor.json's unigram_entropy beside it, else
// the data folder's manifest.json (scripts/shakespeare_corpus.py writes one) under the file's stem.
std::optional<double> read_unigram_entropy(const std::string& data_path);

}  // namespace normlab
