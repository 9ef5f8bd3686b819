#include "parallel/data/state_slice.h"

#include <algorithm>
#include <numeric>

namespace ndt {

std::string StateSlice::tensor_name() const {
  switch (kind) {
    case exp_avg: return "optim.exp_avg." + param->name();
    case exp_avg_sq: return "optim.exp_avg_sq." + param->name();
    default: return param->name();
  }
}

int64_t StateSlice::numel() const { return shape_numel(shape()); }

void StateSlice::read(int64_t first, int64_t count, float* out) const {
  if (swap) {
    swap->read_elements(swap_element + first, count, out);
  } else {
    std::copy(data + first, data + first + count, out);
  }
}

void StateSlice::write(int64_t first, int64_t count, const float* in) const {
  if (swap) {
    swap->write_elements(swap_element + first, count, in);
  } else {
    std::copy(in, in + count, data + first);
  }
}

Shape StateSlice::offset() const {
  Shape o = param->local_offset;
  o[0] += row_begin;
  return o;
}

Shape StateSlice::shape() const {
  Shape s = param->local_shape;
  s[0] = row_end - row_begin;
  return s;
}

std::vector<int> balanced_writers(const std::vector<Parameter>& params, int ranks) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int> writer(params.size(), 0);
  for (size_t p : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    writer[p] = r;
    load[static_cast<size_t>(r)] += params[p].numel();
  }
  return writer;
}

}  // namespace ndt
