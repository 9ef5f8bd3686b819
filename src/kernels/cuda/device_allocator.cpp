#include "kernels/cuda/device_allocator.h"

#include "core/error.h"
#include "core/memory.h"
#include "core/system_memory.h"
#include "kernels/cuda/check.h"

namespace ndt::cuda {

size_t CachingDeviceAllocator::size_class(size_t bytes) {
  constexpr size_t kSmallStep = 512, kLargeStep = size_t{2} << 20, kLarge = size_t{1} << 20;
  const size_t step = bytes < kLarge ? kSmallStep : kLargeStep;
  return bytes == 0 ? kSmallStep : (bytes + step - 1) / step * step;
}

void* CachingDeviceAllocator::allocate(size_t bytes) {
  const size_t block_bytes = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(block_bytes);
    if (it != free_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      cached_ -= block_bytes;
      return block;
    }
  }
  void* block = nullptr;
  if (cudaMalloc(&block, block_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free out-of-memory status, then retry empty
    empty_cache();
    if (cudaMalloc(&block, block_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      fail("cannot allocate {} ({} bytes) of cuda memory: the device has {} free of {} (the ledger counts {} "
           "in live cuda tensors)",
           bytes_text(static_cast<double>(bytes)), bytes, bytes_text(static_cast<double>(free_bytes)),
           bytes_text(static_cast<double>(total_bytes)),
           bytes_text(static_cast<double>(MemoryLedger::for_device(Device::cuda).current_total())));
    }
  }
  return block;
}

void CachingDeviceAllocator::release(void* block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t block_bytes = size_class(bytes);
  free_[block_bytes].push_back(block);
  cached_ += block_bytes;
}

void CachingDeviceAllocator::zero(void* ptr, size_t bytes) { NDT_CUDA_CHECK(cudaMemset(ptr, 0, bytes)); }

void CachingDeviceAllocator::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  const cudaMemcpyKind kind = dst_device == Device::cpu   ? cudaMemcpyDeviceToHost
                              : src_device == Device::cpu ? cudaMemcpyHostToDevice
                                                          : cudaMemcpyDeviceToDevice;
  NDT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

size_t CachingDeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

void CachingDeviceAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [block_bytes, blocks] : free_) {
    for (void* block : blocks) NDT_CUDA_CHECK(cudaFree(block));
  }
  free_.clear();
  cached_ = 0;
}

}  // namespace ndt::cuda
