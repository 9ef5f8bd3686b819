// The CUDA device of this process. start() selects it (NDT_CUDA_DEVICE, else the node-
// local rank modulo the devices, so ranks of one node spread over its GPUs) and installs
// its caching allocator as core's memory for Device::cuda tensors. Every kernel, copy and
// GEMM runs on the legacy default stream, so they are ordered with each other and with
// the host copies (one stream: no stream-ordered frees needed).
#pragma once

#include <string>

namespace ndt::cuda {

// Devices visible to this process; 0 where there is no driver or no GPU (never throws).
int device_count();
// Selects the device and installs Device::cuda memory; later calls do nothing. Throws
// ndt::Error naming the cause when there is no device.
void start();
bool started();
// "NVIDIA H200, sm_90, 139.8 GiB" (start() first).
std::string device_description();
// Waits until everything launched so far has finished; throws on a kernel's error.
void synchronize();

}  // namespace ndt::cuda
