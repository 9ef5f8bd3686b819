// What the GPU tests share: a fixture that skips (GTEST_SKIP, reported by CTest as
// skipped, never passed) where no CUDA device is present and otherwise runs the test on
// the cuda backend, host <-> device copies through Tensor, and the comparison of a CUDA
// result with its CPU twin's.
#pragma once

#include "core/tensor.h"
#include "kernels/cuda/device.h"
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace ndt::testing {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device here: this GPU test did not run";
    kernels::set_backend(kernels::Backend::cuda);
  }
  void TearDown() override { kernels::set_backend(kernels::Backend::cpu); }
};

// A device tensor [n] holding host's values.
template <typename T>
Tensor on_device(const std::vector<T>& host) {
  const auto n = static_cast<int64_t>(host.size());
  Tensor staged = Tensor::empty({n}, dtype_of<T>(), MemTag::other);
  if (n > 0) std::memcpy(staged.raw(), host.data(), host.size() * sizeof(T));
  Tensor device = Tensor::empty({n}, dtype_of<T>(), MemTag::other, Device::cuda);
  device.copy_from(staged);
  return device;
}

// The values of a device tensor, on the host.
template <typename T>
std::vector<T> on_host(const Tensor& device) {
  Tensor staged = Tensor::empty(device.shape(), device.dtype(), MemTag::other);
  staged.copy_from(device);
  std::vector<T> host(static_cast<size_t>(device.numel()));
  if (!host.empty()) std::memcpy(host.data(), staged.raw(), host.size() * sizeof(T));
  return host;
}

// Each got[i] within tolerance[i] of want[i] (the bound the caller derives for that
// element: the two backends add the same terms in different orders).
inline void expect_within(const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<double>& tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(diff <= tolerance[i]) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " on cuda, " << want[i] << " on cpu (bound "
                    << tolerance[i] << ")";
    }
  }
}

// The bound for results that are sums of `terms` fp32 values of magnitude up to `scale`
// each: reordering the sum changes it by at most terms x 2^-23 x scale (plus a few ulps of
// the elementwise functions, within the same bound for terms >= 4).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double terms,
                         const std::string& what) {
  double scale = 1.0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::abs(w)));
  expect_within(got, want, std::vector<double>(want.size(), std::max(terms, 4.0) * std::ldexp(1.0, -23) * scale),
                what);
}

}  // namespace ndt::testing
