#include "interchange/safetensors.h"

#include "core/error.h"
#include "core/output_file.h"
#include "interchange/stored_values.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

namespace ndt {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian and read/written in host byte order");

namespace {

using nlohmann::json;

// One tensor's header entry, validated against the buffer.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // bytes, relative to the buffer
};

// The header's dtype string of each of kStoredDTypes.
const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    default: fail("safetensors stores parameters as {}, not {}", stored_dtype_names(), dtype_name(dtype));
  }
}

DType parse_dtype(const std::string& dtype, const std::string& path, const std::string& name) {
  for (DType d : kStoredDTypes) {
    if (dtype == safetensors_dtype(d)) return d;
  }
  fail("safetensors {}: tensor {} has unsupported dtype \"{}\" (supported: F32, BF16, F16)", path, name,
       dtype);
}

Entry parse_entry(const std::string& name, const json& j, uint64_t buffer_bytes, const std::string& path) {
  Entry e;
  e.name = name;
  std::string dtype;
  std::vector<int64_t> offsets;
  try {
    dtype = j.at("dtype").get<std::string>();
    e.shape = j.at("shape").get<Shape>();
    offsets = j.at("data_offsets").get<std::vector<int64_t>>();
  } catch (const json::exception& ex) {
    fail("safetensors {}: tensor {} has a malformed header entry: {}", path, name, ex.what());
  }
  e.dtype = parse_dtype(dtype, path, name);
  NDT_CHECK(offsets.size() == 2 && offsets[0] >= 0 && offsets[0] <= offsets[1],
            "safetensors {}: tensor {} has data_offsets {} (need [begin, end] with 0 <= begin <= end)", path,
            name, j.at("data_offsets").dump());
  e.begin = static_cast<uint64_t>(offsets[0]);
  e.end = static_cast<uint64_t>(offsets[1]);
  NDT_CHECK(e.end <= buffer_bytes,
            "safetensors {}: tensor {} has data_offsets [{}, {}] outside the {}-byte buffer", path, name,
            e.begin, e.end, buffer_bytes);
  uint64_t bytes = dtype_size(e.dtype);
  for (int64_t d : e.shape) {
    NDT_CHECK(d >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes),
              "safetensors {}: tensor {} has an invalid shape {}", path, name, shape_str(e.shape));
  }
  NDT_CHECK(bytes == e.end - e.begin,
            "safetensors {}: tensor {} of dtype {} and shape {} needs {} bytes but its data_offsets "
            "[{}, {}] hold {}",
            path, name, dtype, shape_str(e.shape), bytes, e.begin, e.end, e.end - e.begin);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& path) {
  NDT_CHECK(j.is_object(), "safetensors {}: __metadata__ is not a JSON object", path);
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    NDT_CHECK(value.is_string(), "safetensors {}: __metadata__ value of {} is not a string", path, key);
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// Throws naming two tensors whose byte ranges overlap.
void check_disjoint(std::vector<Entry>& entries, const std::string& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    const Entry &a = entries[i - 1], &b = entries[i];
    NDT_CHECK(b.begin >= a.end, "safetensors {}: tensors {} [{}, {}) and {} [{}, {}) overlap", path, a.name,
              a.begin, a.end, b.name, b.begin, b.end);
  }
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NDT_CHECK(in && !std::filesystem::is_directory(path), "cannot open safetensors {}: {}", path,
            std::strerror(errno));
  const uint64_t file_bytes = std::filesystem::file_size(path);
  uint64_t header_bytes = 0;
  NDT_CHECK(file_bytes >= 8 && in.read(reinterpret_cast<char*>(&header_bytes), 8),
            "safetensors {} is truncated: {} bytes, shorter than the 8-byte header length", path, file_bytes);
  NDT_CHECK(header_bytes <= file_bytes - 8,
            "safetensors {}: header length {} goes beyond the end of the {}-byte file", path, header_bytes,
            file_bytes);
  std::string text(header_bytes, '\0');
  NDT_CHECK(in.read(text.data(), static_cast<std::streamsize>(header_bytes)),
            "safetensors {}: reading the header failed", path);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& ex) {
    fail("safetensors {}: header is not valid JSON: {}", path, ex.what());
  }
  NDT_CHECK(header.is_object(), "safetensors {}: header is not a JSON object", path);

  const uint64_t buffer_start = 8 + header_bytes, buffer_bytes = file_bytes - buffer_start;
  SafetensorsHeader result;
  result.header_bytes = buffer_start;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      result.metadata = parse_metadata(value, path);
    } else {
      entries.push_back(parse_entry(key, value, buffer_bytes, path));
    }
  }
  check_disjoint(entries, path);
  for (const Entry& e : entries) result.tensors[e.name] = {e.dtype, e.shape, buffer_start + e.begin, buffer_start + e.end};
  return result;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const SafetensorsHeader header = read_safetensors_header(path);
  std::ifstream in(path, std::ios::binary);
  NDT_CHECK(in, "cannot open safetensors {}: {}", path, std::strerror(errno));
  SafetensorsFile file;
  file.metadata = header.metadata;
  for (const auto& [name, e] : header.tensors) {
    SafetensorsTensor& t = file.tensors[name];
    t.shape = e.shape;
    t.values.resize(static_cast<size_t>(shape_numel(e.shape)));
    in.seekg(static_cast<std::streamoff>(e.begin));
    NDT_CHECK(read_values(in, e.dtype, t.values), "safetensors {}: reading tensor {} failed", path, name);
  }
  return file;
}

void write_safetensors(const std::string& path, const SafetensorsFile& file, DType dtype) {
  const char* dtype_string = safetensors_dtype(dtype);
  json header = json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    NDT_CHECK(name != "__metadata__", "safetensors {}: a tensor cannot be named __metadata__", path);
    NDT_CHECK(t.values.size() == static_cast<size_t>(shape_numel(t.shape)),
              "safetensors {}: tensor {} has {} values for shape {}", path, name, t.values.size(),
              shape_str(t.shape));
    const uint64_t bytes = t.values.size() * dtype_size(dtype);
    header[name] = {{"dtype", dtype_string},
                    {"shape", t.shape},
                    {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_bytes = text.size();

  AtomicFile out(path);
  out.write(&header_bytes, 8);
  out.write(text.data(), text.size());
  for (const auto& [name, t] : file.tensors) write_values(out, t.values, dtype);
  out.commit();
}

}  // namespace ndt
