// The caching allocator of Device::cuda memory (core/device.h's DeviceMemory), as
// PyTorch's: cudaMalloc and cudaFree synchronise the device and cost far more than a
// kernel, and training asks for the same sizes every step. Requests round up to a size
// class (512 B steps below 1 MiB, 2 MiB steps above) and freed blocks wait in one free
// list per class. All work is on one stream, so a block freed by the host can be handed
// out again at once: a later kernel using it runs after every earlier one. When the
// device refuses an allocation the cache is emptied (cudaFree) and it is tried once more.
#pragma once

#include "core/device.h"

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace ndt::cuda {

class CachingDeviceAllocator final : public DeviceMemory {
 public:
  // The size class holding a request of `bytes`.
  static size_t size_class(size_t bytes);

  void* allocate(size_t bytes) override;
  void release(void* block, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;
  size_t cached_bytes() const override;
  // Frees every cached block back to the device.
  void empty_cache();

 private:
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  size_t cached_ = 0;
};

}  // namespace ndt::cuda
