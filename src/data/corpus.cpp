#include "data/corpus.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {

namespace {
bool is_bin(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
}

// splitmix64: a counter-based generator, so any (seed, k, r) can be drawn independently.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

Corpus Corpus::load(const std::string& path) {
  if (!file_exists(path)) throw UsageError(path + ": data file not found");
  std::string bytes = read_file(path);
  Corpus c;
  c.path_ = path;
  if (is_bin(path)) {
    if (bytes.size() % 2 != 0) {
      throw UsageError(fmt::format("{}: .bin file has an odd size ({} bytes); expected uint16 tokens",
                                   path, bytes.size()));
    }
    c.tokens_.resize(bytes.size() / 2);
    for (size_t i = 0; i < c.tokens_.size(); ++i) {
      c.tokens_[i] = static_cast<uint16_t>(static_cast<uint8_t>(bytes[2 * i]) |
                                           (static_cast<uint8_t>(bytes[2 * i + 1]) << 8));
    }
  } else {
    c.tokens_.assign(bytes.begin(), bytes.end());
    for (size_t i = 0; i < bytes.size(); ++i) c.tokens_[i] = static_cast<uint8_t>(bytes[i]);
  }
  return c;
}

Corpus Corpus::from_tokens(std::vector<uint16_t> tokens, std::string name) {
  Corpus c;
  c.tokens_ = std::move(tokens);
  c.path_ = std::move(name);
  return c;
}

int64_t Corpus::max_token() const {
  uint16_t m = 0;
  for (uint16_t t : tokens_) m = std::max(m, t);
  return m;
}

torch::Tensor Corpus::windows(const std::vector<int64_t>& offsets, int64_t ctx) const {
  auto out = torch::empty({static_cast<int64_t>(offsets.size()), ctx + 1}, torch::kLong);
  auto* dst = out.data_ptr<int64_t>();
  for (size_t r = 0; r < offsets.size(); ++r) {
    TORCH_CHECK(offsets[r] >= 0 && offsets[r] + ctx + 1 <= size(), "window out of range");
    const uint16_t* src = tokens_.data() + offsets[r];
    for (int64_t j = 0; j <= ctx; ++j) dst[r * (ctx + 1) + j] = src[j];
  }
  return out;
}

std::vector<int64_t> batch_offsets(int64_t n, int64_t ctx, int64_t batch_size, int64_t k,
                                   bool shuffle, uint64_t seed) {
  TORCH_CHECK(n > ctx + 1, "corpus of ", n, " tokens is too short for ctx ", ctx);
  std::vector<int64_t> out(batch_size);
  const uint64_t starts = static_cast<uint64_t>(n - ctx);  // valid starts: 0 .. n-ctx-1
  for (int64_t r = 0; r < batch_size; ++r) {
    if (shuffle) {
      const uint64_t h = splitmix64(splitmix64(seed ^ 0x6e6f726d6c6162ULL) +
                                    static_cast<uint64_t>(k * batch_size + r));
      out[r] = static_cast<int64_t>((static_cast<unsigned __int128>(h) * starts) >> 64);
    } else {
      out[r] = ((k * batch_size + r) * ctx) % (n - ctx - 1);
    }
  }
  return out;
}

std::vector<int64_t> eval_offsets(int64_t n, int64_t ctx, int64_t max_windows) {
  std::vector<int64_t> out;
  for (int64_t off = 0; off + ctx + 1 <= n && static_cast<int64_t>(out.size()) < max_windows; off += ctx) {
    out.push_back(off);
  }
  return out;
}

std::optional<EntropyFloor> read_entropy_floor(const std::string& data_path) {
  namespace fs = std::filesystem;
  const fs::path p(data_path);
  const std::string floor_path = (p.parent_path() / "floor.json").string();
  if (!file_exists(floor_path)) return std::nullopt;
  try {
    YAML::Node root = YAML::Load(read_file(floor_path));
    const std::string stem = p.stem().string();  // "train" or "val"
    if (!root[stem]) return std::nullopt;
    EntropyFloor f;
    f.floor = root[stem]["entropy_floor"].as<double>();
    f.unigram = root[stem]["unigram_entropy"].as<double>();
    return f;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

}  // namespace normlab
