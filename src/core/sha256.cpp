#include "core/sha256.h"

#include <openssl/evp.h>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) != 1) {
    throw RuntimeFailure("SHA-256: OpenSSL's EVP_Digest failed");
  }
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

std::string sha256_file_hex(const std::string& path) {
  if (!file_exists(path)) throw UsageError(path + ": file not found");
  return sha256_hex(read_file(path));
}

}  // namespace normlab
