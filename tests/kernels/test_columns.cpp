// The fused projections' column kernels (kernels/cpu/columns.h) against scalar references,
// bit for bit: split_columns_round is the fp32 sum with the bias (a double sum rounded to
// fp32 once) then core/dtype.h's rounding to bf16 / f16 (none in f32), and the gathers are
// the blocks side by side (cast with the scalar encoders); odd widths, a block without a
// bias, and a matrix large enough for the threaded path.
#include "kernels/cpu/columns.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace ndt::cpu {
namespace {

float scalar_round(DType dtype, float x) {
  if (dtype == DType::bf16) return bf16_to_f32(f32_to_bf16(x));
  if (dtype == DType::f16) return f16_to_f32(f32_to_f16(x));
  return x;
}

uint16_t scalar_encode(DType dtype, float x) { return dtype == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x); }

std::vector<float> random(int64_t n, uint64_t stream) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0, 0.0f, 3.0f, 17, stream);
  return x;
}

struct Case {
  int64_t rows;
  std::array<int64_t, 3> widths;
};

// Catches: a block written at another block's columns, a bias skipped or added to the
// wrong block, a missing or double rounding, rows of the threaded path dropped.
TEST(Columns, SplitAddsTheBiasAndRoundsOnceEachBlock) {
  for (const Case& k : {Case{5, {7, 3, 3}}, Case{1031, {96, 32, 33}}}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const int64_t total = k.widths[0] + k.widths[1] + k.widths[2];
      const std::vector<float> src = random(k.rows * total, 1);
      std::array<std::vector<float>, 3> out, bias;
      std::array<ColumnBlock, 3> blocks;
      for (size_t i = 0; i < 3; ++i) {
        out[i].assign(static_cast<size_t>(k.rows * k.widths[i]), -1.0f);
        bias[i] = random(k.widths[i], 2 + i);
        blocks[i] = {out[i].data(), i == 1 ? nullptr : bias[i].data(), k.widths[i]};
      }
      kernels::split_columns_round(dtype, src.data(), blocks.data(), 3, k.rows);
      int64_t offset = 0;
      for (size_t i = 0; i < 3; ++i) {
        for (int64_t r = 0; r < k.rows; ++r) {
          for (int64_t j = 0; j < k.widths[i]; ++j) {
            const double x = src[static_cast<size_t>(r * total + offset + j)];
            const float sum = static_cast<float>(i == 1 ? x : x + bias[i][static_cast<size_t>(j)]);
            const float got = out[i][static_cast<size_t>(r * k.widths[i] + j)];
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(scalar_round(dtype, sum)))
                << dtype_name(dtype) << " block " << i << " row " << r << " column " << j;
          }
        }
        offset += k.widths[i];
      }
    }
  }
}

// Catches: blocks gathered out of order or at the wrong stride, a cast that is not
// cast_to_lowp's, an fp32 gather that changes a bit.
TEST(Columns, GatherPlacesTheBlocksSideBySide) {
  for (const Case& k : {Case{4, {5, 2, 9}}, Case{1027, {64, 40, 31}}}) {
    const int64_t total = k.widths[0] + k.widths[1] + k.widths[2];
    std::array<std::vector<float>, 3> in;
    std::array<ColumnBlock, 3> blocks;
    for (size_t i = 0; i < 3; ++i) {
      in[i] = random(k.rows * k.widths[i], 10 + i);
      blocks[i] = {in[i].data(), nullptr, k.widths[i]};
    }
    std::vector<float> f32(static_cast<size_t>(k.rows * total));
    kernels::gather_columns(blocks.data(), 3, k.rows, f32.data());
    for (DType dtype : {DType::bf16, DType::f16}) {
      std::vector<uint16_t> low(f32.size());
      kernels::gather_columns_lowp(dtype, blocks.data(), 3, k.rows, low.data());
      int64_t offset = 0;
      for (size_t i = 0; i < 3; ++i) {
        for (int64_t r = 0; r < k.rows; ++r) {
          for (int64_t j = 0; j < k.widths[i]; ++j) {
            const float x = in[i][static_cast<size_t>(r * k.widths[i] + j)];
            const size_t at = static_cast<size_t>(r * total + offset + j);
            ASSERT_EQ(std::bit_cast<uint32_t>(f32[at]), std::bit_cast<uint32_t>(x)) << i << ", " << r << ", " << j;
            ASSERT_EQ(low[at], scalar_encode(dtype, x)) << dtype_name(dtype) << " " << i << ", " << r << ", " << j;
          }
        }
        offset += k.widths[i];
      }
    }
  }
}

// Catches: a dtype the kernels cannot round to accepted silently.
TEST(Columns, RefuseOtherDtypes) {
  float x = 1.0f;
  ColumnBlock block{&x, nullptr, 1};
  uint16_t bits = 0;
  EXPECT_THROW(kernels::split_columns_round(DType::e4m3, &x, &block, 1, 1), Error);
  EXPECT_THROW(kernels::gather_columns_lowp(DType::f32, &block, 1, 1, &bits), Error);
}

}  // namespace
}  // namespace ndt::cpu
