// A run's quantity by step, for the report: a step's value (the 1-based step a record
// names), in step order. Stored as one sorted array of (step, value) pairs, 16 bytes a
// point (a std::map's node took about 64): a 200,000-step run's two dozen series fit in
// tens of megabytes. Records come in step order, so setting a value is an append; a step
// written again (a rollback, a resume from an earlier checkpoint) replaces its value,
// and an earlier step missing from the array is inserted in its place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace ndt {

class Series {
 public:
  using value_type = std::pair<int64_t, double>;
  using const_iterator = std::vector<value_type>::const_iterator;

  Series() = default;
  Series(std::initializer_list<value_type> points);  // steps in any order; a repeated step keeps the last

  double& operator[](int64_t step);  // the value of `step`, inserted as 0 if absent
  double at(int64_t step) const;     // throws std::out_of_range if absent
  size_t count(int64_t step) const;
  size_t size() const { return points_.size(); }
  bool empty() const { return points_.empty(); }
  const_iterator begin() const { return points_.begin(); }
  const_iterator end() const { return points_.end(); }
  const value_type& back() const { return points_.back(); }
  void shrink_to_fit() { points_.shrink_to_fit(); }
  bool operator==(const Series& other) const = default;

 private:
  std::vector<value_type> points_;  // sorted by step, each step once
};

}  // namespace ndt
