// Device memory and the dispatch on the cuda backend: tensors on the device through the
// caching allocator, counted in the cuda ledger under their tags (never the host's);
// copies host <-> device <-> device; the size classes; a kernel without a CUDA twin
// refused by name; and, where no device is present, the backend refused by name.
#include "../common/errors.h"
#include "../common/gradcheck.h"
#include "core/memory.h"
#include "cuda_test.h"
#include "kernels/cuda/device_allocator.h"

#include <vector>

namespace ndt {
namespace {

using testing::CudaTest;
using testing::on_device;
using testing::on_host;
using testing::random_vector;

TEST(CudaDevice, SizeClassesRoundUp) {
  using A = cuda::CachingDeviceAllocator;
  EXPECT_EQ(A::size_class(0), 512u);
  EXPECT_EQ(A::size_class(1), 512u);
  EXPECT_EQ(A::size_class(513), 1024u);
  EXPECT_EQ(A::size_class((size_t{1} << 20) - 1), size_t{1} << 20);
  EXPECT_EQ(A::size_class(size_t{1} << 20), size_t{2} << 20);
  EXPECT_EQ(A::size_class((size_t{2} << 20) + 1), size_t{4} << 20);
}

// Runs where there is no GPU (this is the check that does): the backend is refused.
TEST(CudaDevice, WithoutADeviceTheBackendIsRefusedByName) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  testing::expect_error([] { kernels::set_backend(kernels::Backend::cuda); }, {"backend cuda", "no CUDA device"});
  EXPECT_EQ(kernels::backend(), kernels::Backend::cpu);
}

class CudaMemory : public CudaTest {};

TEST_F(CudaMemory, TensorsLiveOnTheDeviceAndCountInItsLedger) {
  MemoryLedger& gpu = MemoryLedger::for_device(Device::cuda);
  MemoryLedger& host = MemoryLedger::instance();
  const size_t gpu_before = gpu.current(MemTag::activations), host_before = host.current(MemTag::activations);
  {
    Tensor t = Tensor::zeros({1000, 3}, DType::f32, MemTag::activations, Device::cuda);
    EXPECT_EQ(t.device(), Device::cuda);
    EXPECT_EQ(t.slice(2, 5).device(), Device::cuda);
    EXPECT_EQ(gpu.current(MemTag::activations), gpu_before + 12000);
    EXPECT_EQ(host.current(MemTag::activations), host_before);
    EXPECT_EQ(on_host<float>(t), std::vector<float>(3000, 0.0f)) << "zeros() zeroes device memory";
  }
  EXPECT_EQ(gpu.current(MemTag::activations), gpu_before);
  EXPECT_GE(device_memory(Device::cuda).cached_bytes(), 12000u) << "the freed block waits for reuse";
}

TEST_F(CudaMemory, CopiesBetweenHostAndDeviceAndWithinTheDevice) {
  const std::vector<float> values = random_vector(60, 1);
  Tensor a = on_device(values);
  Tensor b = Tensor::empty({60}, DType::f32, MemTag::other, Device::cuda);
  b.copy_from(a);  // device -> device
  EXPECT_EQ(on_host<float>(b), values);
  Tensor rows = Tensor::zeros({6, 10}, DType::f32, MemTag::other, Device::cuda);
  rows.slice(2, 4).copy_from(a.view({6, 10}).slice(0, 2));  // into a row range
  const std::vector<float> got = on_host<float>(rows);
  EXPECT_EQ(got[19], 0.0f);
  EXPECT_EQ(got[20], values[0]);
  EXPECT_EQ(got[39], values[19]);
  EXPECT_EQ(got[40], 0.0f);
}

TEST_F(CudaMemory, AKernelWithoutACudaTwinIsRefusedByName) {
  std::vector<float> x(8, 1.0f);
  Tensor d = on_device(x);
  testing::expect_error([&] { kernels::attention_row_dot(d.data<float>(), d.data<float>(), d.data<float>(), 1, 2, 1, 4); },
                        {"kernels::attention_row_dot", "cuda backend has no such kernel"});
}

}  // namespace
}  // namespace ndt
