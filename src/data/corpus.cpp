#include "data/corpus.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// splitmix64: a counter-based generator, so any (seed, k, r) can be drawn independently.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int32_t read_le32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}

// A read-only mapping of a whole file; unmapped when the last TokenFile holding it goes.
struct Mapping {
  void* addr = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (addr) munmap(addr, bytes);
  }
};

std::shared_ptr<Mapping> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError(fmt::format("{}: cannot open data file: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError(fmt::format("{}: not a regular file", path));
  }
  auto m = std::make_shared<Mapping>();
  m->bytes = static_cast<size_t>(st.st_size);
  if (m->bytes > 0) {
    void* a = ::mmap(nullptr, m->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (a == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw UsageError(fmt::format("{}: cannot map data file: {}", path, std::strerror(err)));
    }
    m->addr = a;
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

template <int W>
int64_t token_at(const unsigned char* p, int64_t i) {
  const unsigned char* q = p + i * W;
  if constexpr (W == 1) {
    return q[0];
  } else if constexpr (W == 2) {
    return static_cast<int64_t>(q[0]) | static_cast<int64_t>(q[1]) << 8;
  } else {
    return static_cast<int64_t>(static_cast<uint32_t>(read_le32(q)));
  }
}

int64_t token_of(const TokenFile& f, int64_t i) {
  switch (f.width) {
    case 1: return token_at<1>(f.tokens, i);
    case 2: return token_at<2>(f.tokens, i);
    default: return token_at<4>(f.tokens, i);
  }
}

template <int W>
std::optional<int64_t> first_at_or_above(const unsigned char* p, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; ++i) {
    if (token_at<W>(p, i) >= limit) return i;
  }
  return std::nullopt;
}
}  // namespace

TokenFile map_token_file(const std::string& path, TokenFormat format) {
  if (!file_exists(path)) throw UsageError(path + ": data file not found");
  auto m = map_file(path);
  const auto* bytes = static_cast<const unsigned char*>(m->addr);
  const auto size = static_cast<int64_t>(m->bytes);
  const int32_t first = size >= 4 ? read_le32(bytes) : 0;
  const bool has_magic = first == kLlmcMagicU16 || first == kLlmcMagicU32;
  if (format == TokenFormat::kAuto) {
    if (has_magic) {
      format = TokenFormat::kLlmc;
    } else if (ends_with(path, ".bin")) {
      throw UsageError(fmt::format(
          "{}: a .bin file without an llm.c header (magic {} or {}): its token width cannot be guessed; set "
          "data.format to u16 or u32 (headerless little-endian tokens)", path, kLlmcMagicU16, kLlmcMagicU32));
    } else {
      format = TokenFormat::kBytes;
    }
  }
  TokenFile f;
  f.path = path;
  f.format = format;
  f.storage = m;
  switch (format) {
    case TokenFormat::kBytes:
    case TokenFormat::kU16:
    case TokenFormat::kU32: {
      f.width = format == TokenFormat::kBytes ? 1 : format == TokenFormat::kU16 ? 2 : 4;
      if (size % f.width != 0) {
        throw UsageError(fmt::format("{}: {} bytes is not a whole number of {}-byte tokens (data.format {})", path,
                                     size, f.width, choice_name(format)));
      }
      f.tokens = bytes;
      f.count = size / f.width;
      break;
    }
    case TokenFormat::kLlmc: {
      if (size < kLlmcHeaderBytes || !has_magic) {
        throw UsageError(fmt::format("{}: not an llm.c shard (data.format llmc): expected a {}-byte header starting "
                                     "with magic {} or {}", path, kLlmcHeaderBytes, kLlmcMagicU16, kLlmcMagicU32));
      }
      const int32_t version = read_le32(bytes + 4), count = read_le32(bytes + 8);
      const int32_t want = first == kLlmcMagicU16 ? kLlmcVersionU16 : kLlmcVersionU32;
      if (version != want) {
        throw UsageError(fmt::format("{}: llm.c header with magic {} has version {}; expected {}", path, first,
                                     version, want));
      }
      f.width = first == kLlmcMagicU16 ? 2 : 4;
      if (count < 0 || kLlmcHeaderBytes + static_cast<int64_t>(count) * f.width != size) {
        throw UsageError(fmt::format("{}: llm.c header says {} tokens of {} bytes ({} bytes with the header) but "
                                     "the file has {} bytes", path, count, f.width,
                                     kLlmcHeaderBytes + static_cast<int64_t>(count) * f.width, size));
      }
      f.tokens = bytes + kLlmcHeaderBytes;
      f.count = count;
      break;
    }
    case TokenFormat::kAuto: break;  // resolved above
  }
  return f;
}

Corpus Corpus::load(const std::vector<std::string>& paths, TokenFormat format) {
  if (paths.empty()) throw UsageError("no data file named");
  Corpus c;
  for (const std::string& p : paths) {
    c.files_.push_back(map_token_file(p, format));
    c.starts_.push_back(c.size_);
    c.size_ += c.files_.back().count;
  }
  return c;
}

Corpus Corpus::from_tokens(std::vector<uint32_t> tokens, std::string name) {
  auto buf = std::make_shared<std::vector<unsigned char>>(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int b = 0; b < 4; ++b) (*buf)[4 * i + b] = static_cast<unsigned char>(tokens[i] >> (8 * b));
  }
  TokenFile f;
  f.path = std::move(name);
  f.format = TokenFormat::kU32;
  f.width = 4;
  f.count = static_cast<int64_t>(tokens.size());
  f.tokens = buf->data();
  f.storage = buf;
  Corpus c;
  c.files_.push_back(std::move(f));
  c.starts_.push_back(0);
  c.size_ = c.files_[0].count;
  return c;
}

std::string Corpus::name() const {
  if (files_.empty()) return "<empty>";
  if (files_.size() == 1) return files_[0].path;
  return fmt::format("{} + {} more", files_[0].path, files_.size() - 1);
}

bool Corpus::tokens_are_bytes() const {
  return !files_.empty() &&
         std::all_of(files_.begin(), files_.end(), [](const TokenFile& f) { return f.format == TokenFormat::kBytes; });
}

int64_t Corpus::token(int64_t i) const {
  TORCH_CHECK(i >= 0 && i < size_, "token index ", i, " out of range [0, ", size_, ")");
  const size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  return token_of(files_[f], i - starts_[f]);
}

void Corpus::copy(int64_t begin, int64_t count, int64_t* out) const {
  TORCH_CHECK(begin >= 0 && count >= 0 && begin + count <= size_, "tokens [", begin, ", ", begin + count,
              ") out of range [0, ", size_, ")");
  if (count == 0) return;
  // The file holding `begin` (the last whose start is <= begin; empty files are skipped over).
  size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  int64_t at = begin - starts_[f];
  while (count > 0) {
    const TokenFile& tf = files_[f];
    const int64_t n = std::min(count, tf.count - at);
    for (int64_t j = 0; j < n; ++j) out[j] = token_of(tf, at + j);
    out += n;
    count -= n;
    ++f;
    at = 0;
  }
}

std::vector<int64_t> Corpus::slice(int64_t begin, int64_t count) const {
  std::vector<int64_t> out(static_cast<size_t>(count));
  copy(begin, count, out.data());
  return out;
}

std::optional<TokenOutOfRange> Corpus::first_token_at_or_above(int64_t limit) const {
  for (const TokenFile& f : files_) {
    std::optional<int64_t> at;
    switch (f.width) {
      case 1: at = first_at_or_above<1>(f.tokens, f.count, limit); break;
      case 2: at = first_at_or_above<2>(f.tokens, f.count, limit); break;
      default: at = first_at_or_above<4>(f.tokens, f.count, limit); break;
    }
    if (at) return TokenOutOfRange{f.path, *at, token_of(f, *at)};
  }
  return std::nullopt;
}

torch::Tensor Corpus::windows(const std::vector<int64_t>& offsets, int64_t ctx) const {
  auto out = torch::empty({static_cast<int64_t>(offsets.size()), ctx + 1}, torch::kLong);
  auto* dst = out.data_ptr<int64_t>();
  for (size_t r = 0; r < offsets.size(); ++r) {
    TORCH_CHECK(offsets[r] >= 0 && offsets[r] + ctx + 1 <= size(), "window out of range");
    copy(offsets[r], ctx + 1, dst + r * (ctx + 1));
  }
  return out;
}

void write_llmc_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  const bool wide = std::any_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t > 65535; });
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw UsageError(fmt::format("{}: {} tokens do not fit one llm.c shard (its count is an int32)", path,
                                 tokens.size()));
  }
  const int width = wide ? 4 : 2;
  std::string bytes(static_cast<size_t>(kLlmcHeaderBytes) + tokens.size() * width, '\0');
  auto put32 = [&bytes](size_t at, uint32_t v) {
    for (int b = 0; b < 4; ++b) bytes[at + b] = static_cast<char>(v >> (8 * b));
  };
  put32(0, static_cast<uint32_t>(wide ? kLlmcMagicU32 : kLlmcMagicU16));
  put32(4, static_cast<uint32_t>(wide ? kLlmcVersionU32 : kLlmcVersionU16));
  put32(8, static_cast<uint32_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const size_t at = static_cast<size_t>(kLlmcHeaderBytes) + i * width;
    for (int b = 0; b < width; ++b) bytes[at + b] = static_cast<char>(tokens[i] >> (8 * b));
  }
  write_file_atomic(path, bytes);
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

std::optional<double> read_unigram_entropy(const std::string& data_path) {
  if (auto f = read_entropy_floor(data_path)) return f->unigram;
  namespace fs = std::filesystem;
  const fs::path p(data_path);
  const std::string manifest = (p.parent_path() / "manifest.json").string();
  if (!file_exists(manifest)) return std::nullopt;
  try {
    const YAML::Node root = YAML::Load(read_file(manifest));
    const YAML::Node e = root[p.stem().string()]["unigram_entropy"];
    if (e && e.IsScalar()) return e.as<double>();
  } catch (const YAML::Exception&) {
  }
  return std::nullopt;
}

}  // namespace normlab
