// Timing helpers: wall-clock seconds since a point, and the median of measured times
// (the machines here are noisy: figures are medians).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace ndt {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median (upper middle for an even count); 0 for an empty list.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace ndt
