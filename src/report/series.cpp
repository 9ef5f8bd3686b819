#include "report/series.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ndt {

namespace {

bool before(const Series::value_type& point, int64_t step) { return point.first < step; }

}  // namespace

Series::Series(std::initializer_list<value_type> points) {
  for (const auto& [step, value] : points) (*this)[step] = value;
}

double& Series::operator[](int64_t step) {
  if (points_.empty() || points_.back().first < step) return points_.emplace_back(step, 0.0).second;
  auto it = std::lower_bound(points_.begin(), points_.end(), step, before);
  if (it == points_.end() || it->first != step) it = points_.insert(it, {step, 0.0});
  return it->second;
}

double Series::at(int64_t step) const {
  const auto it = std::lower_bound(points_.begin(), points_.end(), step, before);
  if (it == points_.end() || it->first != step) throw std::out_of_range("no value at step " + std::to_string(step));
  return it->second;
}

size_t Series::count(int64_t step) const {
  const auto it = std::lower_bound(points_.begin(), points_.end(), step, before);
  return it != points_.end() && it->first == step ? 1 : 0;
}

}  // namespace ndt
