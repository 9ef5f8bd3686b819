#include "checkpoint/checksum.h"

#include <array>
#include <cstring>

#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

namespace ndt::ckpt {

namespace {

// Bit-reversed Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPolynomial = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < bytes; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

#ifdef __SSE4_2__
uint32_t crc32c_sse42(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, sizeof(word));  // unaligned load
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; i < bytes; ++i) c32 = _mm_crc32_u8(c32, p[i]);
  return ~c32;
}
#endif

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
#ifdef __SSE4_2__
  return crc32c_sse42(data, bytes, crc);
#else
  return crc32c_portable(data, bytes, crc);
#endif
}

}  // namespace ndt::ckpt
