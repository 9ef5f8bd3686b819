#include "interchange/stored_values.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
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
