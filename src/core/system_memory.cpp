#include "core/system_memory.h"

#include <fmt/format.h>

#include <fstream>

namespace ndt {

namespace {

// The /proc/meminfo field `key` ("MemTotal:") in bytes; 0 where it cannot be read.
double meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  double kib = 0;
  while (in >> name >> kib) {
    if (name == key) return kib * 1024.0;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace

double physical_memory_bytes() { return meminfo_bytes("MemTotal:"); }

double available_memory_bytes() { return meminfo_bytes("MemAvailable:"); }

std::string bytes_text(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (u < 6 && bytes >= 1024.0) bytes /= 1024.0, ++u;
  return u == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.3g} {}", bytes, units[u]);
}

}  // namespace ndt
