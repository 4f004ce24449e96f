// SHA-256 of a file, as lowercase hex (OpenSSL's libcrypto). Records which tokenizer model a
// checkpoint was trained with, so a later `sample` can tell when the file changed.
#pragma once

#include <string>
#include <string_view>

namespace normlab {

std::string sha256_hex(std::string_view bytes);
std::string sha256_file_hex(const std::string& path);  // UsageError when the file cannot be read

}  // namespace normlab
