#include "core/device.h"

#include "core/error.h"

#include <array>
#include <atomic>

namespace ndt {
namespace {

std::array<std::atomic<DeviceMemory*>, kNumDevices> g_memory{};

}  // namespace

const char* device_name(Device device) {
  switch (device) {
    case Device::cpu:
      return "cpu";
    case Device::cuda:
      return "cuda";
  }
  return "unknown";
}

void set_device_memory(Device device, DeviceMemory* memory) {
  NDT_CHECK(device != Device::cpu, "set_device_memory: host memory is not replaceable");
  g_memory[static_cast<size_t>(device)].store(memory);
}

DeviceMemory& device_memory(Device device) {
  DeviceMemory* memory = g_memory[static_cast<size_t>(device)].load();
  NDT_CHECK(memory != nullptr,
            "no {} device memory: this build has no {} backend (NDT_CUDA=off, or no nvcc at configure time), "
            "or it was not started (kernels::set_backend(Backend::{}))",
            device_name(device), device_name(device), device_name(device));
  return *memory;
}

}  // namespace ndt
