#include "core/memory.h"
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace ndt {
namespace {

TEST(Tensor, ShapeHelpers) {
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({5, 0}), 0);
  EXPECT_EQ(shape_str({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(shape_str({}), "[]");
}

TEST(Tensor, EmptyAndZeros) {
  Tensor t = Tensor::zeros({3, 5}, DType::f32, MemTag::other);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.ndim(), 2);
  EXPECT_EQ(t.dim(0), 3);
  EXPECT_EQ(t.dim(-1), 5);
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(t.tag(), MemTag::other);
  const float* p = t.data<float>();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(p[i], 0.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);  // aligned storage
  Tensor h = Tensor::empty({7}, DType::bf16, MemTag::other);
  EXPECT_EQ(h.nbytes(), 14u);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor::empty({2, -1}, DType::f32, MemTag::other), Error);
}

TEST(Tensor, WrongDtypeAccessThrows) {
  Tensor t = Tensor::zeros({4}, DType::f32, MemTag::other);
  EXPECT_THROW(t.data<int32_t>(), Error);
  Tensor i = Tensor::zeros({4}, DType::i32, MemTag::other);
  EXPECT_NO_THROW(i.data<int32_t>());
  try {
    i.data<float>();
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32"), std::string::npos) << msg;
  }
}

TEST(Tensor, ViewKeepsDataAndChecksNumel) {
  Tensor t = Tensor::zeros({2, 3}, DType::f32, MemTag::other);
  Tensor v = t.view({3, 2});
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  EXPECT_EQ(v.raw(), t.raw());
  try {
    t.view({4, 2});
    FAIL() << "expected ndt::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 2]"), std::string::npos) << msg;
  }
}

TEST(Tensor, SliceOffsetsRows) {
  Tensor t = Tensor::empty({5, 3}, DType::f32, MemTag::other);
  float* p = t.data<float>();
  for (int i = 0; i < 15; ++i) p[i] = static_cast<float>(i);
  Tensor s = t.slice(2, 4);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.raw(), static_cast<char*>(t.raw()) + 2 * 3 * sizeof(float));
  EXPECT_EQ(s.data<float>()[0], 6.0f);
  EXPECT_EQ(s.data<float>()[5], 11.0f);
  // Slice of a slice accumulates the offset.
  Tensor ss = s.slice(1, 2);
  EXPECT_EQ(ss.data<float>()[0], 9.0f);
  // Slice of a reshaped view with a different element size.
  Tensor h = Tensor::empty({4, 2, 2}, DType::bf16, MemTag::other);
  EXPECT_EQ(h.slice(3, 4).raw(), static_cast<char*>(h.raw()) + 3 * 4 * 2);
  // Empty slices are fine; out of range throws naming the range and shape.
  EXPECT_EQ(t.slice(5, 5).numel(), 0);
  EXPECT_THROW(t.slice(3, 2), Error);
  EXPECT_THROW(t.slice(-1, 2), Error);
  try {
    t.slice(4, 6);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[5, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("6"), std::string::npos) << msg;
  }
  Tensor scalar = Tensor::zeros({}, DType::f32, MemTag::other);
  EXPECT_THROW(scalar.slice(0, 0), Error);
}

TEST(Tensor, ZeroAndCopy) {
  Tensor a = Tensor::empty({2, 4}, DType::f32, MemTag::other);
  for (int i = 0; i < 8; ++i) a.data<float>()[i] = static_cast<float>(i + 1);
  Tensor b = Tensor::zeros({2, 4}, DType::f32, MemTag::other);
  b.copy_from(a);
  EXPECT_EQ(b.data<float>()[7], 8.0f);
  EXPECT_NE(b.raw(), a.raw());
  // zero_ on a slice clears only its rows.
  a.slice(1, 2).zero_();
  EXPECT_EQ(a.data<float>()[3], 4.0f);
  EXPECT_EQ(a.data<float>()[4], 0.0f);
  EXPECT_EQ(a.data<float>()[7], 0.0f);
  Tensor c = Tensor::zeros({4, 2}, DType::f32, MemTag::other);
  EXPECT_THROW(c.copy_from(a), Error);
  Tensor d = Tensor::zeros({2, 4}, DType::bf16, MemTag::other);
  EXPECT_THROW(d.copy_from(a), Error);
}

// Catches: a cache that keeps every freed size apart (an MoE run's data-dependent buffers
// then pile up to the cache's limit), gives a block back at the requested size instead of
// its own, or counts the block's size in the ledger.
TEST(TensorCache, AFreedLargeBlockServesARequestUpToAQuarterSmaller) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  MemoryLedger& ledger = MemoryLedger::instance();
  const size_t before = storage_cached_bytes(), live = ledger.current(MemTag::comm);
  { Tensor a = Tensor::empty({37 * kMiB / 4}, DType::f32, MemTag::comm); }
  ASSERT_EQ(storage_cached_bytes() - before, size_t(37 * kMiB));
  {
    Tensor b = Tensor::empty({30 * kMiB / 4}, DType::f32, MemTag::comm);  // 30 >= 37 x 4/5: takes it
    EXPECT_EQ(storage_cached_bytes(), before);
    EXPECT_EQ(ledger.current(MemTag::comm) - live, size_t(30 * kMiB));  // the ledger: what was asked for
  }
  EXPECT_EQ(storage_cached_bytes() - before, size_t(37 * kMiB));  // the whole block came back
  {
    Tensor c = Tensor::empty({20 * kMiB / 4}, DType::f32, MemTag::comm);  // far smaller: a block of its own
    EXPECT_EQ(storage_cached_bytes() - before, size_t(37 * kMiB));
  }
  EXPECT_EQ(storage_cached_bytes() - before, size_t(57 * kMiB));
}

}  // namespace
}  // namespace ndt
