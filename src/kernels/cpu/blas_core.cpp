#include "kernels/cpu/blas_core.h"

#include <array>
#include <cstdlib>
#include <utility>

#include <unistd.h>

extern "C" char* openblas_get_corename(void);

namespace ndt::cpu {

std::string blas_core_name() { return openblas_get_corename(); }

VectorWidth cpu_vector_width() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return VectorWidth::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorWidth::avx2;
  return VectorWidth::narrow;
}

std::optional<std::string> wider_blas_core(std::string_view core, VectorWidth cpu) {
  // OpenBLAS's x86-64 cores (as openblas_get_corename names them) by vector width.
  constexpr std::array<std::pair<std::string_view, VectorWidth>, 27> cores = {{
      {"Unknown", VectorWidth::narrow}, {"Katmai", VectorWidth::narrow},
      {"Coppermine", VectorWidth::narrow}, {"Northwood", VectorWidth::narrow},
      {"Prescott", VectorWidth::narrow}, {"Banias", VectorWidth::narrow},
      {"Atom", VectorWidth::narrow}, {"Core2", VectorWidth::narrow},
      {"Penryn", VectorWidth::narrow}, {"Dunnington", VectorWidth::narrow},
      {"Nehalem", VectorWidth::narrow}, {"Athlon", VectorWidth::narrow},
      {"Opteron", VectorWidth::narrow}, {"Opteron_SSE3", VectorWidth::narrow},
      {"Barcelona", VectorWidth::narrow}, {"Nano", VectorWidth::narrow},
      {"Sandybridge", VectorWidth::narrow}, {"Bobcat", VectorWidth::narrow},
      {"Bulldozer", VectorWidth::narrow}, {"Piledriver", VectorWidth::narrow},
      {"Steamroller", VectorWidth::narrow}, {"Haswell", VectorWidth::avx2},
      {"Excavator", VectorWidth::avx2}, {"Zen", VectorWidth::avx2},
      {"SkylakeX", VectorWidth::avx512}, {"Cooperlake", VectorWidth::avx512},
      {"SapphireRapids", VectorWidth::avx512},
  }};
  for (const auto& [name, width] : cores) {
    if (name != core || width >= cpu) continue;
    if (cpu == VectorWidth::avx512) return "SkylakeX";
    if (cpu == VectorWidth::avx2) return "Haswell";
  }
  return std::nullopt;
}

std::optional<std::string> recommended_blas_core() {
  return wider_blas_core(blas_core_name(), cpu_vector_width());
}

std::string describe_blas_core(std::string_view core, VectorWidth cpu, const char* user_coretype,
                               const char* detected) {
  std::string s = "OpenBLAS " + std::string(core) + " kernels";
  if (detected != nullptr) {
    return s + " (OpenBLAS chose " + detected + " for this CPU; ndtrain set OPENBLAS_CORETYPE)";
  }
  const std::optional<std::string> wider = wider_blas_core(core, cpu);
  if (user_coretype != nullptr && wider) {
    s += " (OPENBLAS_CORETYPE=" + std::string(user_coretype) + " in the environment holds OpenBLAS to narrower " +
         "vectors than this CPU runs: " + *wider + "'s kernels multiply faster; unset OPENBLAS_CORETYPE to " +
         "let ndtrain choose them)";
  }
  return s;
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
