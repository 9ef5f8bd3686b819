// CRC32C (Castagnoli polynomial, as in iSCSI and ext4) of checkpoint chunks. The
// SSE4.2 crc32 instruction computes it at several GB/s, so every chunk is checked on
// load without slowing it down; a byte-table version is the fallback on other CPUs
// and the reference the instruction path is tested against. The `crc` argument
// continues a previous result: crc32c(b, crc32c(a)) == crc32c(a followed by b).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ndt::ckpt {

// The fastest path the build supports.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc = 0);

#ifdef __SSE4_2__
uint32_t crc32c_sse42(const void* data, size_t bytes, uint32_t crc = 0);
#endif

}  // namespace ndt::ckpt
