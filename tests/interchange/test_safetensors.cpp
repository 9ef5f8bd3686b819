// The safetensors reader and writer: a file assembled byte by byte (BF16, F16, F32),
// write/read round trip with metadata and header padding, BF16 and F16 writing with
// round-to-nearest-even ties checked by hand, and every header error.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "interchange/safetensors.h"
#include "support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
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

// Catches: a low-precision writer that truncates instead of rounding to nearest even,
// labels the bytes F32, or lays them out at 4 bytes a value.
TEST(Safetensors, WritesBf16AndF16RoundedToNearestEven) {
  testing::TempDir dir;
  struct Case {
    DType dtype;
    const char* name;
    std::vector<float> values, expected;
  };
  const float nan = std::nanf("");
  const std::vector<Case> cases = {
      // bf16 keeps 7 mantissa bits: 1 + 2^-8 is a tie that rounds to even 1, 1 + 3 x 2^-8 a
      // tie that rounds to even 1 + 2^-6, 1 + 2^-8 + 2^-20 lies above the tie.
      {DType::bf16, "BF16", {1 + 0x1p-8f, 1 + 0x3p-8f, 1 + 0x1p-8f + 0x1p-20f, -0.0f, nan},
       {1, 1 + 0x1p-6f, 1 + 0x1p-7f, -0.0f, nan}},
      // f16 keeps 10: the same ties one level down; 1e6 overflows to inf; 2^-24 is its
      // smallest subnormal.
      {DType::f16, "F16", {1 + 0x1p-11f, 1 + 0x3p-11f, 1e6f, -0x1p-24f, nan},
       {1, 1 + 0x1p-9f, INFINITY, -0x1p-24f, nan}}};
  for (const Case& c : cases) {
    const std::string path = dir.file(std::string(c.name) + ".safetensors");
    SafetensorsFile f;
    f.tensors["a"] = {{5}, c.values};
    f.tensors["b"] = {{1, 3}, {0.5f, -2, 3}};
    f.metadata = {{"format", "pt"}};
    write_safetensors(path, f, c.dtype);

    const nlohmann::json header = testing::safetensors_header(path);
    EXPECT_EQ(header["a"]["dtype"], c.name);
    EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({0, 10}));
    EXPECT_EQ(header["b"]["dtype"], c.name);
    EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({10, 16}));
    EXPECT_EQ(header["__metadata__"]["format"], "pt");
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, testing::read_bytes(path).data(), 8);
    EXPECT_EQ(std::filesystem::file_size(path), 8 + header_bytes + 8 * 2) << c.name;

    SafetensorsFile back = read_safetensors(path);
    EXPECT_EQ(back.tensors["b"].values, (std::vector<float>{0.5f, -2, 3})) << c.name;
    const std::vector<float>& a = back.tensors["a"].values;
    ASSERT_EQ(a.size(), c.expected.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(c.expected[i])) {
        EXPECT_TRUE(std::isnan(a[i])) << c.name << " value " << i;
      } else {
        EXPECT_EQ(a[i], c.expected[i]) << c.name << " value " << i;
        EXPECT_EQ(std::signbit(a[i]), std::signbit(c.expected[i])) << c.name << " value " << i;
      }
    }
  }
  expect_error([&] { write_safetensors(dir.file("e.safetensors"), SafetensorsFile{}, DType::e4m3); },
               {"e4m3", "f32, bf16, f16"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("e.safetensors")));
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
