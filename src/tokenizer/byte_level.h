// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable
// Unicode character (printable Latin-1 bytes for themselves, the others for U+0100 on),
// so a vocabulary of byte strings can be written as text. Byte-level BPE files
// (tokenizer.json, encoder.json, vocab.bpe) spell their tokens in this alphabet;
// ndtrain keeps tokens as raw bytes and converts only when loading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ndt::tok {

// The UTF-8 encoding of the character that stands for byte `b`.
std::string_view byte_level_char(uint8_t b);

// The bytes a byte-level token string stands for, or nullopt when it holds a character
// outside the alphabet (or is not valid UTF-8).
std::optional<std::string> byte_level_decode(std::string_view text);

// The byte-level spelling of raw bytes (the inverse of byte_level_decode).
std::string byte_level_encode(std::string_view bytes);

}  // namespace ndt::tok
