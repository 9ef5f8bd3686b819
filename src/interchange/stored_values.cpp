#include "interchange/stored_values.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

namespace ndt {

static_assert(std::endian::native == std::endian::little,
              "interchange files are little-endian and read/written in host byte order");

bool is_stored_dtype(DType dtype) {
  return std::find(kStoredDTypes.begin(), kStoredDTypes.end(), dtype) != kStoredDTypes.end();
}

std::string stored_dtype_names() {
  std::string names;
  for (DType d : kStoredDTypes) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  return names;
}

void check_storable(const std::string& destination, const std::string& tensor, const std::vector<float>& values,
                    DType dtype) {
  constexpr size_t kChunk = 4096;
  std::vector<char> stored(kChunk * dtype_size(dtype));
  std::vector<float> back(kChunk);
  for (size_t begin = 0; begin < values.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, values.size() - begin);
    for (size_t i = begin; i < begin + n; ++i) {
      NDT_CHECK(std::isfinite(values[i]), "cannot write {}: tensor {} holds {} at element {} (a model file never "
                "holds non-finite weights)", destination, tensor, values[i], i);
    }
    if (dtype == DType::f32) continue;
    convert(values.data() + begin, DType::f32, stored.data(), dtype, n);
    convert(stored.data(), dtype, back.data(), DType::f32, n);
    for (size_t i = 0; i < n; ++i) {
      NDT_CHECK(std::isfinite(back[i]), "cannot write {} as {}: tensor {} element {} = {} is beyond {}'s range and "
                "would be stored as {} (store it as f32{})", destination, dtype_name(dtype), tensor, begin + i,
                values[begin + i], dtype_name(dtype), back[i], dtype == DType::f16 ? " or bf16" : "");
    }
  }
}

void write_values(AtomicFile& out, const std::vector<float>& values, DType dtype) {
  NDT_CHECK(is_stored_dtype(dtype), "writing {}: parameters can be stored as {}, not {}", out.path().string(),
            stored_dtype_names(), dtype_name(dtype));
  if (dtype == DType::f32) return out.write(values.data(), values.size() * sizeof(float));
  std::vector<char> bytes(values.size() * dtype_size(dtype));
  convert(values.data(), DType::f32, bytes.data(), dtype, values.size());
  out.write(bytes.data(), bytes.size());
}

bool read_values(std::istream& in, DType dtype, std::vector<float>& values) {
  const auto bytes = static_cast<std::streamsize>(values.size() * dtype_size(dtype));
  if (dtype == DType::f32) return static_cast<bool>(in.read(reinterpret_cast<char*>(values.data()), bytes));
  std::vector<char> raw(static_cast<size_t>(bytes));
  if (!in.read(raw.data(), bytes)) return false;
  convert(raw.data(), dtype, values.data(), DType::f32, values.size());
  return true;
}

}  // namespace ndt
