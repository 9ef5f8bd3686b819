// What every CUDA kernel file shares, safe for nvcc (no fmt, no core/error.h): status
// checks that throw ndt::Error (device.cpp raises them), launch sizes, and the device
// flag through which a kernel reports bad input (a start or a position out of range)
// that its CPU twin would have refused.
#pragma once

#include "core/device.h"
#include "core/memory.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace ndt::cuda {

// Throws ndt::Error "CUDA: <call> failed: <error>" unless status is cudaSuccess.
void check(cudaError_t status, const char* call);
// Throws ndt::Error with the message (for the .cu files, which cannot use fmt).
[[noreturn]] void refuse(const std::string& message);
// After a launch: throws naming the kernel if the launch failed.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline constexpr int kThreads = 256;  // threads per block of the elementwise kernels
inline constexpr int kWarp = 32;
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

// One int on the device, 0 while all is well; a kernel stores (row + 1) of the first bad
// row it meets. take_bad_row() returns that row (or -1) and clears the flag; it waits for
// the kernels before it, so callers use it only where the CPU twin validates input.
int* bad_row_flag();
int64_t take_bad_row();

// Scratch device memory for one kernel call, counted in the cuda ledger under its tag.
// Freed blocks return to the caching allocator; one stream orders their reuse.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(int64_t count, MemTag tag)
      : bytes_(static_cast<size_t>(count) * sizeof(T)), tag_(tag),
        data_(static_cast<T*>(device_memory(Device::cuda).allocate(bytes_))) {
    MemoryLedger::for_device(Device::cuda).on_alloc(tag_, bytes_);
  }
  ~DeviceBuffer() {
    device_memory(Device::cuda).release(data_, bytes_);
    MemoryLedger::for_device(Device::cuda).on_free(tag_, bytes_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* data() const { return data_; }

 private:
  size_t bytes_;
  MemTag tag_;
  T* data_;
};

}  // namespace ndt::cuda

#define NDT_CUDA_CHECK(call) ::ndt::cuda::check((call), #call)

#ifdef __CUDACC__
namespace ndt::cuda {
// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ inline float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ inline float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
}  // namespace ndt::cuda
// for (i ...) over [0, n) across the whole grid.
#define NDT_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)
#endif
