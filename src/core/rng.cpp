#include "core/rng.h"

#include <cmath>

namespace ndt {

uint64_t hash_name(std::string_view name) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64-bit offset basis (0xcbf29ce484222325)
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::array<uint32_t, 4> philox(uint64_t seed, uint64_t stream, uint64_t index) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

static float to_unit(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

float uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return to_unit(philox(seed, stream, index)[0]);
}

float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = philox(seed, stream, index);
  // u1 in (0, 1] so the log is finite.
  double u1 = (static_cast<double>(r[0] >> 8) + 1.0) / 16777216.0;
  double u2 = static_cast<double>(r[1] >> 8) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void fill_normal(float* out, int64_t n, int64_t first_index, float mean, float std, uint64_t seed,
                 uint64_t stream) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    out[k] = mean + std * normal_at(seed, stream, static_cast<uint64_t>(first_index + k));
  }
}

}  // namespace ndt
