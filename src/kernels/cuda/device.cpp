#include "kernels/cuda/device.h"

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_allocator.h"

#include <cstdlib>
#include <mutex>
#include <string>

namespace ndt::cuda {
namespace {

std::once_flag g_started_once;
bool g_started = false;
int g_device = -1;

// A device index >= 0 from the environment variable `name`, or -1 where it is unset.
long index_from(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return -1;
  char* end = nullptr;
  const long index = std::strtol(value, &end, 10);
  NDT_CHECK(end != value && *end == '\0' && index >= 0, "{}={}: expected a device index >= 0", name, value);
  return index;
}

// NDT_CUDA_DEVICE, else the node-local rank (Open MPI, Slurm) modulo the device count.
int chosen_device(int count) {
  if (const long index = index_from("NDT_CUDA_DEVICE"); index >= 0) {
    NDT_CHECK(index < count, "NDT_CUDA_DEVICE={}: this process sees {} CUDA device(s)", index, count);
    return static_cast<int>(index);
  }
  for (const char* local_rank : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const long index = index_from(local_rank); index >= 0) return static_cast<int>(index % count);
  }
  return 0;
}

}  // namespace

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) fail("CUDA: {} failed: {} ({})", call, cudaGetErrorString(status), cudaGetErrorName(status));
}

void refuse(const std::string& message) { throw Error(message); }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void start() {
  std::call_once(g_started_once, [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    NDT_CHECK(status == cudaSuccess && count > 0,
              "backend cuda: no CUDA device is usable here ({}); run with the cpu backend",
              status == cudaSuccess ? "the driver reports 0 devices" : cudaGetErrorString(status));
    g_device = chosen_device(count);
    NDT_CUDA_CHECK(cudaSetDevice(g_device));
    static CachingDeviceAllocator* allocator = new CachingDeviceAllocator();  // outlives every tensor
    set_device_memory(Device::cuda, allocator);
    g_started = true;
  });
  NDT_CHECK(g_started, "backend cuda: the device failed to start earlier in this process");
}

bool started() { return g_started; }

std::string device_description() {
  NDT_CHECK(g_started, "cuda::device_description: the device is not started");
  cudaDeviceProp prop{};
  NDT_CUDA_CHECK(cudaGetDeviceProperties(&prop, g_device));
  return fmt::format("{}, sm_{}{}, {:.1f} GiB", prop.name, prop.major, prop.minor,
                     static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

void synchronize() { NDT_CUDA_CHECK(cudaDeviceSynchronize()); }

int* bad_row_flag() {
  static int* flag = [] {
    int* f = nullptr;
    NDT_CUDA_CHECK(cudaMalloc(&f, sizeof(int)));
    NDT_CUDA_CHECK(cudaMemset(f, 0, sizeof(int)));
    return f;
  }();
  return flag;
}

int64_t take_bad_row() {
  int value = 0;
  NDT_CUDA_CHECK(cudaMemcpy(&value, bad_row_flag(), sizeof(int), cudaMemcpyDeviceToHost));
  if (value == 0) return -1;
  NDT_CUDA_CHECK(cudaMemset(bad_row_flag(), 0, sizeof(int)));
  return value - 1;
}

}  // namespace ndt::cuda
