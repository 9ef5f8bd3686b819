#include "core/memory.h"
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace ndt {
namespace {

// The ledger is process-wide; tests run one at a time, so they compare before/after deltas.

TEST(Ledger, CurrentAndPeakFollowTensorLifetime) {
  auto& ledger = MemoryLedger::instance();
  const size_t base = ledger.current(MemTag::optimizer);
  const size_t base_total = ledger.current_total();
  const size_t base_other = ledger.current(MemTag::activations);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak(MemTag::optimizer), base);
  {
    Tensor a = Tensor::empty({100}, DType::f32, MemTag::optimizer);  // 400 bytes
    EXPECT_EQ(ledger.current(MemTag::optimizer), base + 400);
    EXPECT_EQ(ledger.current_total(), base_total + 400);
    {
      Tensor b = Tensor::empty({50}, DType::bf16, MemTag::optimizer);  // 100 bytes
      EXPECT_EQ(ledger.current(MemTag::optimizer), base + 500);
      EXPECT_EQ(ledger.peak(MemTag::optimizer), base + 500);
    }
    EXPECT_EQ(ledger.current(MemTag::optimizer), base + 400);
    EXPECT_EQ(ledger.peak(MemTag::optimizer), base + 500);  // peak stays
    EXPECT_EQ(ledger.peak_total(), base_total + 500);
    // Another tag is untouched.
    EXPECT_EQ(ledger.current(MemTag::activations), base_other);
  }
  EXPECT_EQ(ledger.current(MemTag::optimizer), base);
  EXPECT_EQ(ledger.current_total(), base_total);
  EXPECT_EQ(ledger.peak(MemTag::optimizer), base + 500);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak(MemTag::optimizer), base);
  EXPECT_EQ(ledger.peak_total(), base_total);
}

TEST(Ledger, PeakTotalIsPeakOfSumNotSumOfPeaks) {
  auto& ledger = MemoryLedger::instance();
  const size_t base_total = ledger.current_total();
  ledger.reset_peaks();
  { Tensor g = Tensor::empty({256}, DType::f32, MemTag::grads); }       // 1024 bytes, freed
  { Tensor c = Tensor::empty({128}, DType::f32, MemTag::comm); }        // 512 bytes, freed
  EXPECT_EQ(ledger.peak_total(), base_total + 1024);
  EXPECT_GE(ledger.peak(MemTag::grads), 1024u);
  EXPECT_GE(ledger.peak(MemTag::comm), 512u);
}

TEST(Ledger, ViewsAndCopiesShareStorageWithoutDoubleCounting) {
  auto& ledger = MemoryLedger::instance();
  const size_t base = ledger.current(MemTag::params);
  Tensor v;
  {
    Tensor t = Tensor::zeros({4, 6}, DType::f32, MemTag::params);
    EXPECT_EQ(ledger.current(MemTag::params), base + 96);
    Tensor copy = t;
    Tensor r = t.view({2, 12});
    Tensor s = t.slice(1, 3);
    v = t.view({24});
    EXPECT_EQ(ledger.current(MemTag::params), base + 96);
    // Writes through a view are seen by the original.
    r.data<float>()[13] = 5.0f;
    EXPECT_EQ(t.data<float>()[13], 5.0f);
    EXPECT_EQ(copy.data<float>()[13], 5.0f);
  }
  // The view keeps the storage alive.
  EXPECT_EQ(ledger.current(MemTag::params), base + 96);
  EXPECT_EQ(v.data<float>()[13], 5.0f);
  v = Tensor();
  EXPECT_EQ(ledger.current(MemTag::params), base);
}

TEST(Memory, ProcessRss) {
  size_t current = process_current_rss_bytes();
  EXPECT_GT(current, 0u);
  EXPECT_GE(process_peak_rss_bytes(), current);  // high-water mark read after the current value
  EXPECT_EQ(mem_tag_name(MemTag::optimizer), "optimizer");
}

}  // namespace
}  // namespace ndt
