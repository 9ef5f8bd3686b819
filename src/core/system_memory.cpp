#include "core/system_memory.h"

#include <fmt/format.h>

#include <fstream>

namespace ndt {

double physical_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024.0;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (u < 6 && bytes >= 1024.0) bytes /= 1024.0, ++u;
  return u == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.3g} {}", bytes, units[u]);
}

}  // namespace ndt
