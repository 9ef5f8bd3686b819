#include "kernels/cpu/blas_core.h"

#include <array>
#include <cstdlib>
#include <string_view>

#include <unistd.h>

extern "C" char* openblas_get_corename(void);

namespace ndt::cpu {

std::string blas_core_name() { return openblas_get_corename(); }

std::optional<std::string> recommended_blas_core() {
  // OpenBLAS's generic and pre-AVX2 x86-64 cores: slower than what an AVX2 CPU runs.
  constexpr std::array<std::string_view, 8> weak = {"Prescott", "Core2",   "Penryn",      "Dunnington",
                                                    "Nehalem",  "Sandybridge", "Atom", "Katmai"};
  const std::string current = blas_core_name();
  bool is_weak = false;
  for (std::string_view w : weak) is_weak |= current == w;
  if (!is_weak) return std::nullopt;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return std::nullopt;
}

void restart_with_recommended_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::optional<std::string> core = recommended_blas_core();
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
  setenv("NDT_OPENBLAS_CORE_DETECTED", blas_core_name().c_str(), 1);
  execv("/proc/self/exe", argv);  // returns only on failure
}

}  // namespace ndt::cpu
