#include "data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "data/corpus.h"

namespace normlab {

namespace {
namespace fs = std::filesystem;

// The C interface of data/spm_shim.cpp.
struct SpmApi {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*piece_size)(const void*) = nullptr;
  long (*piece_bytes)(const void*, int) = nullptr;
  long (*encode)(const void*, const char*, size_t, int*, size_t, char*, size_t) = nullptr;
  long (*decode)(const void*, const int*, size_t, char*, size_t, char*, size_t) = nullptr;
  int (*train)(const char* const*, const char* const*, size_t, char*, size_t) = nullptr;
  std::string error;  // why it could not be loaded ("" when it was)
};

std::string exe_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

SpmApi open_api() {
  SpmApi a;
#ifdef NORMLAB_SANITIZE_BUILD
  a.error = "SentencePiece is loaded with RTLD_DEEPBIND (data/spm_shim.cpp), which AddressSanitizer does not "
            "support: tokenizers work in the regular build only";
  return a;
#else
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("NORMLAB_SPM_SHIM")) candidates.emplace_back(env);
#ifdef NORMLAB_SPM_SHIM_PATH
  candidates.emplace_back(NORMLAB_SPM_SHIM_PATH);
#endif
  if (const std::string d = exe_dir(); !d.empty()) candidates.push_back(d + "/libnormlab_spm.so");
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    if (!file_exists(c)) {
      tried += (tried.empty() ? "" : ", ") + c + " (missing)";
      continue;
    }
    // RTLD_DEEPBIND: SentencePiece binds to its own protobuf-lite, not to LibTorch's libprotobuf.
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + c + " (" + dlerror() + ")";
  }
  if (!lib) {
    a.error = "cannot load NormLab's SentencePiece library libnormlab_spm.so (tried " + tried +
              "); scripts/setup.sh installs libsentencepiece-dev and builds it";
    return a;
  }
  auto sym = [&](const char* name) {
    void* p = dlsym(lib, name);
    if (!p && a.error.empty()) a.error = std::string("libnormlab_spm.so lacks ") + name;
    return p;
  };
  a.load = reinterpret_cast<decltype(a.load)>(sym("nl_spm_load"));
  a.free = reinterpret_cast<decltype(a.free)>(sym("nl_spm_free"));
  a.piece_size = reinterpret_cast<decltype(a.piece_size)>(sym("nl_spm_piece_size"));
  a.piece_bytes = reinterpret_cast<decltype(a.piece_bytes)>(sym("nl_spm_piece_bytes"));
  a.encode = reinterpret_cast<decltype(a.encode)>(sym("nl_spm_encode"));
  a.decode = reinterpret_cast<decltype(a.decode)>(sym("nl_spm_decode"));
  a.train = reinterpret_cast<decltype(a.train)>(sym("nl_spm_train"));
  return a;  // the library stays loaded for the life of the process
#endif
}

const SpmApi& api() {
  static const SpmApi a = open_api();
  if (!a.error.empty()) throw UsageError(a.error);
  return a;
}
}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  if (!file_exists(path)) throw UsageError(path + ": tokenizer model not found");
  const SpmApi& a = api();
  char err[512] = "";
  void* h = a.load(path.c_str(), err, sizeof err);
  if (!h) throw UsageError(fmt::format("{}: not a SentencePiece model: {}", path, err));
  Tokenizer t;
  t.handle_ = std::shared_ptr<void>(h, a.free);
  const int n = a.piece_size(h);
  t.bytes_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t.bytes_[i] = a.piece_bytes(h, i);
  t.path_ = path;
  t.sha256_ = sha256_file_hex(path);
  return t;
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  const SpmApi& a = api();
  char err[512] = "";
  std::vector<int> ids(text.size() + 16);  // byte fallback: at most one token per byte
  const long n = a.encode(handle_.get(), text.data(), text.size(), ids.data(), ids.size(), err, sizeof err);
  if (n < 0) throw UsageError(fmt::format("{}: cannot encode: {}", path_, err));
  if (static_cast<size_t>(n) > ids.size()) {
    ids.resize(static_cast<size_t>(n));
    a.encode(handle_.get(), text.data(), text.size(), ids.data(), ids.size(), err, sizeof err);
  }
  return std::vector<int64_t>(ids.begin(), ids.begin() + n);
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  const SpmApi& a = api();
  std::vector<int> in;
  in.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw UsageError(fmt::format("{}: token {} is outside the tokenizer's {} pieces", path_, id, vocab_size()));
    }
    in.push_back(static_cast<int>(id));
  }
  char err[512] = "";
  std::string out(ids.size() * 8 + 16, '\0');
  long n = a.decode(handle_.get(), in.data(), in.size(), out.data(), out.size(), err, sizeof err);
  if (n < 0) throw UsageError(fmt::format("{}: cannot decode: {}", path_, err));
  if (static_cast<size_t>(n) > out.size()) {
    out.resize(static_cast<size_t>(n));
    n = a.decode(handle_.get(), in.data(), in.size(), out.data(), out.size(), err, sizeof err);
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

int64_t Tokenizer::token_bytes(int64_t id) const {
  return id >= 0 && id < vocab_size() ? bytes_[static_cast<size_t>(id)] : 0;
}

void train_tokenizer(const TokenizerTraining& t) {
  if (!file_exists(t.input)) throw UsageError(t.input + ": --input: text file not found");
  if (t.vocab < 2) throw UsageError(fmt::format("--vocab: expected an integer >= 2, got {}", t.vocab));
  if (t.out.empty()) throw UsageError("--out: expected the model file to write");
  const SpmApi& a = api();
  // SentencePiece writes <prefix>.model and <prefix>.vocab; both are renamed into place when done.
  const std::string prefix = fmt::format("{}.tmp{}", t.out, ::getpid());
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"input", t.input},
      {"model_prefix", prefix},
      {"vocab_size", std::to_string(t.vocab)},
      {"model_type", "bpe"},
      {"byte_fallback", "true"},            // any byte encodes; newlines and rare characters included
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},  // decode(encode(text)) == text
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"max_sentence_length", "16384"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"unk_id", "0"},
      {"input_sentence_size", std::to_string(t.max_lines)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "1"},
  };
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : flags) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  char err[1024] = "";
  const int rc = a.train(keys.data(), values.data(), keys.size(), err, sizeof err);
  std::error_code ec;
  if (rc != 0) {
    fs::remove(prefix + ".model", ec);
    fs::remove(prefix + ".vocab", ec);
    throw UsageError(fmt::format("{}: SentencePiece training failed: {}", t.input, err));
  }
  fs::path vocab_path = t.out;
  vocab_path.replace_extension(".vocab");
  fs::rename(prefix + ".vocab", vocab_path, ec);
  fs::rename(prefix + ".model", t.out);  // last: the model appears complete or not at all
}

int64_t encode_text_file(const Tokenizer& tok, const std::string& input, const std::string& out) {
  if (!file_exists(input)) throw UsageError(input + ": --input: text file not found");
  std::ifstream in(input, std::ios::binary);
  if (!in) throw UsageError(input + ": cannot read");
  std::vector<uint32_t> tokens;
  std::string line;
  while (std::getline(in, line)) {
    if (!in.eof()) line += '\n';  // the last line has no newline when the file does not end in one
    for (int64_t id : tok.encode(line)) tokens.push_back(static_cast<uint32_t>(id));
  }
  if (tokens.empty()) throw UsageError(input + ": no text to encode");
  write_llmc_shard(out, tokens);
  return static_cast<int64_t>(tokens.size());
}

}  // namespace normlab
