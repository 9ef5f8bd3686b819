#include "tokenizer/byte_level.h"

#include <array>

namespace ndt::tok {

namespace {

struct Alphabet {
  std::array<uint32_t, 256> code{};       // byte -> code point
  std::array<int16_t, 324> byte_of{};     // code point -> byte (-1: not in the alphabet)
  std::array<std::string, 256> utf8;      // byte -> UTF-8 of its character
};

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the alphabet stays below U+0800: two bytes
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

const Alphabet& alphabet() {
  static const Alphabet a = [] {
    Alphabet t;
    t.byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      t.code[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      t.byte_of[t.code[b]] = static_cast<int16_t>(b);
      t.utf8[b] = utf8_of(t.code[b]);
    }
    return t;
  }();
  return a;
}

}  // namespace

std::string_view byte_level_char(uint8_t b) { return alphabet().utf8[b]; }

std::optional<std::string> byte_level_decode(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<uint8_t>(text[i]);
    uint32_t cp = 0;
    if (c < 0x80) {
      cp = c, i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu), i += 2;
    } else {
      return std::nullopt;  // three-byte characters and above lie outside the alphabet
    }
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) return std::nullopt;
    out += static_cast<char>(a.byte_of[cp]);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += byte_level_char(static_cast<uint8_t>(c));
  return out;
}

}  // namespace ndt::tok
