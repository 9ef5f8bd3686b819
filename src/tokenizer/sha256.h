// SHA-256 (FIPS 180-4) of a file or of bytes, as lowercase hex: what `ndtrain prepare`
// records beside the shards to name the tokenizer file that made them.
#pragma once

#include <string>
#include <string_view>

namespace ndt::tok {

std::string sha256_hex(std::string_view bytes);
// Throws ndt::Error naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace ndt::tok
