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

// The median with an even count's the mean of the middle two; 0 for an empty list. For
// few values where the upper middle would be a side (two rounds: the slower one).
inline double median_of_middle(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace ndt
