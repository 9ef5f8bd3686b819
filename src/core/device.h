// Where bytes live: the host, or a CUDA device. Core stays free of any device API: a
// device's backend (kernels/cuda/device_allocator.h) supplies a DeviceMemory when it
// starts, and Storage, Tensor::zero_ and Tensor::copy_from go through it. A build
// without that backend (NDT_CUDA=off) has the enumerator but never a DeviceMemory, so
// asking for device memory is an error naming the device.
#pragma once

#include <cstddef>

namespace ndt {

enum class Device { cpu, cuda };
inline constexpr size_t kNumDevices = 2;
const char* device_name(Device device);  // "cpu", "cuda"

// One device's memory, as its backend provides it. Calls are synchronous: a copy or a
// zeroing has finished when it returns.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A block of at least `bytes`; throws ndt::Error (naming the bytes) when the device refuses.
  virtual void* allocate(size_t bytes) = 0;
  // Gives back a block of allocate(bytes), the same bytes.
  virtual void release(void* block, size_t bytes) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  // Copies bytes between this device and the host, or within this device.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  // Bytes of freed blocks kept for reuse (not counted by the ledger).
  virtual size_t cached_bytes() const = 0;
};

// Installs the memory of a device other than cpu (memory: lives as long as the process).
void set_device_memory(Device device, DeviceMemory* memory);
// The device's memory; throws ndt::Error naming the device when none was installed.
DeviceMemory& device_memory(Device device);

}  // namespace ndt
