// The dispatch's state: the active backend (the routing itself is kernels.h's Routed).
#include "kernels/kernels.h"

#include "core/error.h"
#include "kernels/cpu/blas_core.h"

#include <cstdlib>

#include <atomic>

namespace ndt::kernels {
namespace {

std::atomic<Backend> g_backend{Backend::cpu};

}  // namespace

void detail::unknown_backend(const char* kernel) {
  fail("kernels::{}: active backend {} has no implementation in this build (available: cpu)", kernel,
       static_cast<int>(g_backend.load(std::memory_order_relaxed)));
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::cpu:
      return "cpu";
  }
  return "unknown";
}

Backend backend() { return g_backend.load(std::memory_order_relaxed); }

void set_backend(Backend backend) {
  switch (backend) {
    case Backend::cpu:
      g_backend.store(backend, std::memory_order_relaxed);
      return;
  }
  fail("kernels::set_backend: unknown backend {} (this build has: cpu)", static_cast<int>(backend));
}

std::string gemm_library() {
  std::string s = "OpenBLAS " + cpu::blas_core_name() + " kernels";
  // Set by ndtrain when it restarted itself with a better core (apps/ndtrain/main.cpp).
  if (const char* weaker = std::getenv("NDT_OPENBLAS_CORE_DETECTED")) {
    s += std::string(" (OpenBLAS chose ") + weaker + " for this CPU; ndtrain set OPENBLAS_CORETYPE)";
  }
  return s;
}

}  // namespace ndt::kernels
