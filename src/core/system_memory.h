// This machine's physical memory, for checks made before allocating (a run that cannot
// fit is refused naming the setting and the bytes, not ended by std::bad_alloc) and for
// the planner's measured CPU profile.
#pragma once

#include <string>

namespace ndt {

// MemTotal of /proc/meminfo in bytes; 0 where it cannot be read.
double physical_memory_bytes();
// MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping); 0
// where it cannot be read.
double available_memory_bytes();

// "1.5 GiB", "3.2 TiB", "4 EiB", "1.2e+03 EiB": bytes for messages, whatever their size.
std::string bytes_text(double bytes);

}  // namespace ndt
