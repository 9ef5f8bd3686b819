// Timing helpers shared by the `ndtrain bench` commands.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace ndt {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median (upper middle for an even count) of a non-empty list.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace ndt
