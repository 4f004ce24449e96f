// Token corpora and batching (data/README.md). Byte-level by default: a text file's bytes
// are its tokens; `.bin` files hold little-endian uint16 tokens (nanoGPT layout). Batch offsets
// are a pure function of (seed, micro-batch index, row), so a resumed run needs only the number
// of micro-batches consumed to continue exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/torch.h"

namespace normlab {

class Corpus {
 public:
  // Reads a text or .bin file; throws UsageError naming the path if it cannot.
  static Corpus load(const std::string& path);
  static Corpus from_tokens(std::vector<uint16_t> tokens, std::string name = "<memory>");

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<uint16_t>& tokens() const { return tokens_; }
  const std::string& path() const { return path_; }
  int64_t max_token() const;

  // (rows, ctx + 1) int64 windows starting at the given offsets.
  torch::Tensor windows(const std::vector<int64_t>& offsets, int64_t ctx) const;

 private:
  std::vector<uint16_t> tokens_;
  std::string path_;
};

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

}  // namespace normlab
