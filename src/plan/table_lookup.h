// Lookup in a calibrated device's measured tables (plan/device_profile.h): the GEMM
// efficiency by size, the attention rate by sequence length, a collective's call time by
// wire bytes. Each is interpolated between its points in log key, since the points are
// spaced by factors (2x, 8x, 16x).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace ndt {

// How the value goes between two points: linearly (an efficiency, a rate), or linearly
// in log value (a time that grows by a power of the size).
enum class ValueScale { linear, log };

// A table's value at `x`, interpolated in log x between the points (keys ascending),
// held at the first and last points' values beyond them. The table must not be empty.
template <typename Point>
double interpolate_in_log(const std::vector<Point>& table, double x, double Point::*key, double Point::*value,
                          ValueScale scale = ValueScale::linear) {
  if (x <= table.front().*key) return table.front().*value;
  if (x >= table.back().*key) return table.back().*value;
  const auto above =
      std::upper_bound(table.begin(), table.end(), x, [&](double v, const Point& p) { return v < p.*key; });
  const Point& lo = *(above - 1);
  const Point& hi = *above;
  const double w = std::log(x / lo.*key) / std::log(hi.*key / lo.*key);
  if (scale == ValueScale::log) return lo.*value * std::exp(w * std::log(hi.*value / lo.*value));
  return lo.*value + w * (hi.*value - lo.*value);
}

}  // namespace ndt
