// The dispatch's state: the active backend (the routing itself is kernels.h's Routed).
#include "kernels/kernels.h"

#include "core/error.h"
#include "kernels/cpu/blas_core.h"
#if NDT_HAS_CUDA
#include "kernels/cuda/device.h"
#endif

#include <cstdlib>

#include <atomic>

namespace ndt::kernels {
namespace {

std::atomic<Backend> g_backend{Backend::cpu};

#if NDT_HAS_CUDA
constexpr const char* kBuiltBackends = "cpu, cuda";
#else
constexpr const char* kBuiltBackends = "cpu";
#endif

}  // namespace

void detail::unknown_backend(const char* kernel) {
  fail("kernels::{}: active backend {} has no implementation in this build (available: {})", kernel,
       static_cast<int>(g_backend.load(std::memory_order_relaxed)), kBuiltBackends);
}

void detail::no_cuda_twin(const char* kernel) {
  fail("kernels::{}: the cuda backend has no such kernel yet (docs/gpu.md lists those it has); run it with "
       "the cpu backend",
       kernel);
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::cpu:
      return "cpu";
    case Backend::cuda:
      return "cuda";
  }
  return "unknown";
}

Backend backend() { return g_backend.load(std::memory_order_relaxed); }

void set_backend(Backend backend) {
  switch (backend) {
    case Backend::cpu:
      g_backend.store(backend, std::memory_order_relaxed);
      return;
    case Backend::cuda:
#if NDT_HAS_CUDA
      cuda::start();
      g_backend.store(backend, std::memory_order_relaxed);
      return;
#else
      fail("kernels::set_backend: backend cuda is not in this build (configured with NDT_CUDA=off, or NDT_CUDA=auto "
           "without nvcc; docs/gpu.md)");
#endif
  }
  fail("kernels::set_backend: unknown backend {} (this build has: {})", static_cast<int>(backend), kBuiltBackends);
}

#if !NDT_HAS_CUDA
// No cuda backend in this build: set_backend refuses it, so these never run.
template <typename R, typename... Args, R (*Cpu)(Args...)>
R detail::CudaTwin<Cpu>::call(const char* name, Args...) {
  fail("kernels::{}: backend cuda is not in this build (NDT_CUDA=off)", name);
}
#define NDT_INSTANTIATE_TWIN(name) template struct detail::CudaTwin<&cpu::name>;
NDT_KERNEL_LIST(NDT_INSTANTIATE_TWIN)
#undef NDT_INSTANTIATE_TWIN
#endif

std::string gemm_library() {
  // NDT_OPENBLAS_CORE_DETECTED: set by ndtrain when it restarted itself with a wider core.
  return cpu::describe_blas_core(cpu::blas_core_name(), cpu::cpu_vector_width(), std::getenv("OPENBLAS_CORETYPE"),
                                 std::getenv("NDT_OPENBLAS_CORE_DETECTED"));
}

}  // namespace ndt::kernels
