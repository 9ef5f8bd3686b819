// Counter-based random numbers (Philox-4x32-10). A value is a pure function of
// (seed, stream, index): a parameter's element i is drawn from (seed, hash(name), i),
// so any shard can initialise its own slice and the pieces match the whole tensor.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ndt {

// Stable 64-bit FNV-1a hash, used to turn a parameter name into a stream id.
uint64_t hash_name(std::string_view name);

// Ten Philox rounds over counter (index, stream) with key seed: four 32-bit words.
std::array<uint32_t, 4> philox(uint64_t seed, uint64_t stream, uint64_t index);

// Uniform in [0, 1) and standard normal (Box-Muller on one Philox block) at a position.
float uniform_at(uint64_t seed, uint64_t stream, uint64_t index);
float normal_at(uint64_t seed, uint64_t stream, uint64_t index);

// out[k] = mean + std * normal_at(seed, stream, first_index + k) for k < n.
void fill_normal(float* out, int64_t n, int64_t first_index, float mean, float std, uint64_t seed,
                 uint64_t stream);

}  // namespace ndt
