#include "parallel/state_slice.h"

namespace ndt {

std::string StateSlice::tensor_name() const {
  switch (kind) {
    case exp_avg: return "optim.exp_avg." + param->name();
    case exp_avg_sq: return "optim.exp_avg_sq." + param->name();
    default: return param->name();
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

}  // namespace ndt
