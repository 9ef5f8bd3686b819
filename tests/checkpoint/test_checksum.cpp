#include "checkpoint/checksum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ndt::ckpt {
namespace {

using CrcFn = uint32_t (*)(const void*, size_t, uint32_t);

// Known answers: "123456789" is the standard check value; the 32-byte patterns are
// the CRC32C examples of RFC 3720 (iSCSI), appendix B.4.
void expect_known_vectors(CrcFn crc) {
  const std::string check = "123456789";
  EXPECT_EQ(crc(check.data(), check.size(), 0), 0xE3069283u);
  EXPECT_EQ(crc(nullptr, 0, 0), 0u);
  std::vector<unsigned char> bytes(32, 0x00);
  EXPECT_EQ(crc(bytes.data(), bytes.size(), 0), 0x8A9136AAu);
  bytes.assign(32, 0xFF);
  EXPECT_EQ(crc(bytes.data(), bytes.size(), 0), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc(bytes.data(), bytes.size(), 0), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc(bytes.data(), bytes.size(), 0), 0x113FDB5Cu);
  // Continuing a previous result equals one pass over the concatenation.
  EXPECT_EQ(crc(check.data() + 4, 5, crc(check.data(), 4, 0)), 0xE3069283u);
}

TEST(Crc32c, PortableKnownVectors) { expect_known_vectors(crc32c_portable); }

TEST(Crc32c, DefaultKnownVectors) { expect_known_vectors(crc32c); }

#ifdef __SSE4_2__
TEST(Crc32c, Sse42KnownVectors) { expect_known_vectors(crc32c_sse42); }

// Every length and start alignment around the 8-byte steps of the instruction path.
TEST(Crc32c, Sse42MatchesPortable) {
  std::vector<unsigned char> bytes(200);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t start = 0; start < 8; ++start) {
    for (size_t n = 0; start + n <= bytes.size(); ++n) {
      ASSERT_EQ(crc32c_sse42(bytes.data() + start, n, 0x1234u),
                crc32c_portable(bytes.data() + start, n, 0x1234u))
          << "start " << start << " length " << n;
    }
  }
}
#else
TEST(Crc32c, Sse42KnownVectors) { GTEST_SKIP() << "built without SSE4.2"; }
#endif

}  // namespace
}  // namespace ndt::ckpt
