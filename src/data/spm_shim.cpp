// The one file that includes SentencePiece: a small C interface over it, built as its own shared
// library (libnormlab_spm.so) and loaded by data/tokenizer.cpp with RTLD_DEEPBIND.
//
// Why a separate library: libsentencepiece carries its own copy of protobuf-lite and exports those
// symbols, while Debian's LibTorch links the system libprotobuf. Linked into one process, the
// dynamic linker binds LibTorch's protobuf calls to SentencePiece's copy (or the reverse), and the
// process crashes before main (measured: a segfault in protobuf's descriptor registration). Loaded
// with RTLD_LOCAL | RTLD_DEEPBIND, SentencePiece keeps its own symbols and LibTorch never sees them.
// Only C types cross this boundary; errors come back as text.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <dlfcn.h>

#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// RTLD_DEEPBIND's one trap: an executable that uses std::cout / std::cerr / std::clog holds
// copy-relocated objects that libstdc++ initialises, while a deep-bound library binds to
// libstdc++'s own storage of them, which nobody initialises: SentencePiece's first log line would
// crash there (measured: a segfault in ostream::sentry from its BPE trainer). Here, where the same
// deep binding applies, those objects are built over that storage sharing the initialised
// streams' buffers, so both write to the same stdout and stderr.
// (RTLD_DEFAULT would search this library's deep scope too; the main program's handle searches
// the executable first, where the initialised copies are.)
template <class Stream>
void share_stream(void* program, Stream& mine, const char* symbol) {
  auto* canonical = static_cast<Stream*>(dlsym(program, symbol));
  if (canonical && canonical != &mine) new (&mine) Stream(canonical->rdbuf());
}

__attribute__((constructor)) void share_standard_streams() {
  void* program = dlopen(nullptr, RTLD_NOW);
  if (!program) return;
  share_stream(program, std::cout, "_ZSt4cout");
  share_stream(program, std::cerr, "_ZSt4cerr");
  share_stream(program, std::clog, "_ZSt4clog");
  dlclose(program);
}

void set_error(char* err, size_t errlen, const std::string& what) {
  if (!err || errlen == 0) return;
  const size_t n = std::min(errlen - 1, what.size());
  std::memcpy(err, what.data(), n);
  err[n] = '\0';
}
}  // namespace

extern "C" {

void* nl_spm_load(const char* path, char* err, size_t errlen) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto st = sp->Load(path);
  if (!st.ok()) {
    set_error(err, errlen, st.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

void nl_spm_free(void* h) { delete static_cast<sentencepiece::SentencePieceProcessor*>(h); }

int nl_spm_piece_size(const void* h) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize();
}

// The bytes of text a token stands for: a byte-fallback token is one byte, a control or unknown
// token none, any other piece its UTF-8 text with the whitespace mark U+2581 as one space.
long nl_spm_piece_bytes(const void* h, int id) {
  const auto* sp = static_cast<const sentencepiece::SentencePieceProcessor*>(h);
  if (sp->IsByte(id)) return 1;
  if (sp->IsControl(id) || sp->IsUnknown(id) || sp->IsUnused(id)) return 0;
  const std::string piece = sp->IdToPiece(id);
  static const std::string kSpace = "\xe2\x96\x81";  // U+2581
  long bytes = 0;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      bytes += 1;
      i += kSpace.size();
    } else {
      bytes += 1;
      i += 1;
    }
  }
  return bytes;
}

// Encodes text; writes at most cap ids and returns how many there are (-1 on error).
long nl_spm_encode(const void* h, const char* text, size_t len, int* ids, size_t cap, char* err, size_t errlen) {
  std::vector<int> out;
  const auto st = static_cast<const sentencepiece::SentencePieceProcessor*>(h)->Encode(
      std::string_view(text, len), &out);
  if (!st.ok()) {
    set_error(err, errlen, st.ToString());
    return -1;
  }
  std::memcpy(ids, out.data(), std::min(cap, out.size()) * sizeof(int));
  return static_cast<long>(out.size());
}

// Decodes ids; writes at most cap bytes and returns how many there are (-1 on error).
long nl_spm_decode(const void* h, const int* ids, size_t n, char* text, size_t cap, char* err, size_t errlen) {
  std::string out;
  const auto st = static_cast<const sentencepiece::SentencePieceProcessor*>(h)->Decode(
      std::vector<int>(ids, ids + n), &out);
  if (!st.ok()) {
    set_error(err, errlen, st.ToString());
    return -1;
  }
  std::memcpy(text, out.data(), std::min(cap, out.size()));
  return static_cast<long>(out.size());
}

// Trains a model from n key/value flags (SentencePiece's trainer flags without the dashes).
int nl_spm_train(const char* const* keys, const char* const* values, size_t n, char* err, size_t errlen) {
  std::unordered_map<std::string, std::string> kwargs;
  for (size_t i = 0; i < n; ++i) kwargs[keys[i]] = values[i];
  const auto st = sentencepiece::SentencePieceTrainer::Train(kwargs);
  if (!st.ok()) {
    set_error(err, errlen, st.ToString());
    return 1;
  }
  return 0;
}

}  // extern "C"
