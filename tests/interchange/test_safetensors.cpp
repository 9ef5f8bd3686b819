// The safetensors reader and writer: a file assembled byte by byte (BF16, F16, F32),
// write/read round trip with metadata and header padding, and every header error.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "interchange/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace ndt {
namespace {

using testing::expect_error;

std::string u64_bytes(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

// A safetensors file: header length, the header padded to a multiple of 8, the buffer.
std::string file_bytes(std::string header, const std::string& buffer) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return u64_bytes(header.size()) + header + buffer;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(values), s.size());
  return s;
}

TEST(Safetensors, ReadsHandBuiltBf16F16AndF32) {
  testing::TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"F16","shape":[1,3],"data_offsets":[4,10]},)"
      R"("c":{"dtype":"F32","shape":[],"data_offsets":[10,14]},"__metadata__":{"k":"v"}})";
  // bf16 1.0, -2.5; f16 1.0, 0.5, -2.0; f32 3.25
  const std::string buffer = raw<uint16_t>({0x3F80, 0xC020, 0x3C00, 0x3800, 0xC000}) + raw<float>({3.25f});
  testing::write_bytes(dir.file("a.safetensors"), file_bytes(header, buffer));

  SafetensorsFile f = read_safetensors(dir.file("a.safetensors"));
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors["a"].shape, (Shape{2}));
  EXPECT_EQ(f.tensors["a"].values, (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(f.tensors["b"].shape, (Shape{1, 3}));
  EXPECT_EQ(f.tensors["b"].values, (std::vector<float>{1.0f, 0.5f, -2.0f}));
  EXPECT_EQ(f.tensors["c"].shape, Shape{});
  EXPECT_EQ(f.tensors["c"].values, (std::vector<float>{3.25f}));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST(Safetensors, WriteReadRoundTripIsExactAndHeaderPadded) {
  testing::TempDir dir;
  SafetensorsFile f;
  f.tensors["x.weight"] = {{2, 3}, {1, -2, 3.5f, 1e-30f, -0.0f, 7}};
  f.tensors["y"] = {{0}, {}};
  f.tensors["z"] = {{1}, {42}};
  f.metadata = {{"format", "pt"}, {"n", "1"}};
  write_safetensors(dir.file("x.safetensors"), f);

  const std::string bytes = testing::read_bytes(dir.file("x.safetensors"));
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_bytes + 7 * sizeof(float));

  SafetensorsFile back = read_safetensors(dir.file("x.safetensors"));
  EXPECT_EQ(back.metadata, f.metadata);
  ASSERT_EQ(back.tensors.size(), 3u);
  for (const auto& [name, t] : f.tensors) {
    EXPECT_EQ(back.tensors[name].shape, t.shape) << name;
    EXPECT_EQ(std::memcmp(back.tensors[name].values.data(), t.values.data(), t.values.size() * 4), 0) << name;
  }
}

TEST(Safetensors, HeaderErrorsNameFileAndTensor) {
  testing::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto expect = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    testing::write_bytes(path, bytes);
    std::vector<std::string> all = parts;
    all.push_back(path);
    expect_error([&] { read_safetensors(path); }, all);
  };
  expect_error([&] { read_safetensors(dir.file("absent.safetensors")); },
               {"cannot open", "absent.safetensors"});
  expect("abc", {"truncated", "3 bytes"});
  expect(u64_bytes(1000) + std::string(16, ' '), {"header length 1000", "24-byte file"});
  expect(file_bytes("{not json", ""), {"not valid JSON"});
  expect(file_bytes(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"tensor w", "unsupported dtype \"I64\""});
  expect(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')),
         {"tensor w", "data_offsets [0, 8]", "outside the 4-byte buffer"});
  expect(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    std::string(12, '\0')),
         {"tensors w [0, 8) and v [4, 12) overlap"});
  expect(file_bytes(R"({"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"tensor w", "BF16", "[3, 2]", "needs 12 bytes", "hold 8"});
  expect(file_bytes(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
         {"tensor w", "malformed"});
  expect(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0')),
         {"tensor w", "data_offsets [8,0]"});
}

}  // namespace
}  // namespace ndt
