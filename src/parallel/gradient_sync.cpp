#include "parallel/gradient_sync.h"

#include "comm/device_mesh.h"
#include "core/error.h"
#include "parallel/data_parallel.h"
#include "parallel/fsdp.h"
#include "parallel/zero.h"

#include <cmath>

namespace ndt {

void GradientSync::set_tensor_parallel(const ParameterStore& store, const TensorParallel& tp) {
  tp_ = tp;
  counted_.clear();
  for (const Parameter& p : store.params()) counted_.push_back(p.spec.tp_dim >= 0 || tp.rank() == 0);
}

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

std::vector<StateSlice> GradientSync::state_slices() {
  std::vector<StateSlice> slices = layout_state_slices();
  for (StateSlice& s : slices) s.saved = s.saved && (s.param->spec.tp_dim >= 0 || tp_.rank() == 0);
  return slices;
}

double GradientSync::finish_norm(double sum_of_squares) const {
  float sum = static_cast<float>(sum_of_squares);
  tp_all_reduce(tp_, &sum, 1, ReduceOp::sum);
  return std::sqrt(static_cast<double>(sum));
}

std::unique_ptr<GradientSync> make_gradient_sync(ParameterStore& store, DeviceMesh* mesh,
                                                 const DataParallelOptions& o) {
  NDT_CHECK(o.zero_stage >= 0 && o.zero_stage <= 3, "parallel.zero_stage = {} must be 0, 1, 2 or 3", o.zero_stage);
  NDT_CHECK(o.zero_stage == 0 || mesh != nullptr, "parallel.zero_stage = {} needs a job launched with mpirun",
            o.zero_stage);
  std::unique_ptr<GradientSync> sync;
  if (o.zero_stage >= 2) {
    sync = std::make_unique<FullyShardedDataParallel>(store, *mesh, o.zero_stage, o.adamw, o.reshard_after_forward,
                                                      o.prefetch);
  } else if (o.zero_stage == 1) {
    sync = std::make_unique<ZeroDataParallel>(store, *mesh, o.bucket_bytes, o.adamw);
  } else {
    sync = std::make_unique<DataParallel>(store, mesh ? &mesh->axis("dp") : nullptr, o.bucket_bytes, o.adamw);
  }
  sync->set_tensor_parallel(store, o.tp);
  return sync;
}

}  // namespace ndt
