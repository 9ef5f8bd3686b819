#include "kernels/cpu/blas_core.h"

#include <array>
#include <string_view>

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

}  // namespace ndt::cpu
