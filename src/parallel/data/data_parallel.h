// Data parallel (DDP).
// Splits: the global batch across the "dp" mesh axis; parameters, gradients and
// optimizer states are replicated. Under context parallelism gradients are summed over
// dp x cp (the communicator dp_cp): each cp rank computed those of its tokens.
// Communicates: gradients, summed by all-reduce in buckets of the gradient arena,
// each started as soon as backward has written its last gradient and polled between
// backward's kernels; nothing on no_sync micro-steps (gradient accumulation). Under
// expert parallelism the routed experts' gradients (sharded on ep) are summed over edp
// instead, the ranks holding the same experts, in buckets of their own.
//
// The loss is scaled by 1 / (tokens of the global batch) on every rank, so the sum
// over ranks is the global mean: the same gradient one rank would compute on the
// whole batch, up to the order of float additions. Without a communicator (one rank)
// this is plain single-rank training.
#pragma once

#include "comm/communicator.h"
#include "model/parameter.h"
#include "optim/adamw.h"
#include "parallel/data/buckets.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/data/two_level_reduce.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ndt {

class DataParallel : public GradientSync {
 public:
  // dp: the data-parallel group (a one-rank one on one rank).
  // reduce_dtype: f32, or bf16 / f16 (parallel/data/low_precision_comm.h).
  // edp: the expert data-parallel group (DeviceMesh::axis(Axis::edp)), over which the
  // gradients of the parameters sharded on ep are reduced (dp itself when ep = 1).
  DataParallel(ParameterStore& store, Communicator& dp, size_t bucket_bytes, const AdamWConfig& adamw,
               DType reduce_dtype, Communicator& edp);

  void begin_backward(bool sync) override;
  void after_backward(int unit) override;
  void poll() override;
  void finish_backward() override;
  double grad_norm() override;
  int64_t optimizer_steps() const override { return optimizer_.steps_taken(); }
  void set_optimizer_steps(int64_t steps) override { optimizer_.set_steps_taken(steps); }
  void step(float lr, float grad_scale) override;
  size_t bucket_count() const override { return scheduler_.buckets().size(); }
  void zero_grads() override { store_.zero_grads(); }
  std::vector<float> full_parameters() override;
  void update_reduced_gradient(size_t p, const std::function<void(float*, int64_t)>& fn) override;
  double exposed_wait_seconds() const override { return exposed_wait_seconds_; }
  OverlapStats overlap_stats() const override {
    return {scheduler_.launched_in_backward(), scheduler_.launched_at_finish(), 0, 0};
  }

  const std::vector<GradientBucket>& buckets() const { return scheduler_.buckets(); }

  // parallel.dp_reduction, for a dp group that crosses nodes (f32 reductions only):
  // hierarchical routes the dp buckets through two levels; auto measures both on a
  // bucket first. Collective over dp. Describes the choice for the run header.
  void set_reduction(DpReduction reduction, size_t bucket_bytes);
  std::string describe_reduction() const override { return reduction_note_; }

 protected:
  std::vector<StateSlice> layout_state_slices() override;

 private:
  // The communicator parameter p's gradient is reduced over, and its value written by
  // one rank of in checkpoints: edp for a parameter sharded on ep, else dp.
  Communicator* group(const Parameter& p) const { return p.sharded_on(Axis::ep) ? &edp_ : &dp_; }
  std::vector<Communicator*> groups() const;  // group() of every parameter, in store order
  WorkHandle launch(size_t bucket);
  void unstage(size_t bucket);  // a low-precision bucket's reduced values back into the gradients

  ParameterStore& store_;
  Communicator& dp_;
  Communicator& edp_;
  DType reduce_dtype_;
  AdamW optimizer_;
  std::vector<Tensor> staging_;  // low-precision reduction: each bucket's rounded gradients in flight
  BucketScheduler scheduler_;
  std::unique_ptr<TwoLevelAllReduce> two_level_;  // the dp buckets' route when hierarchical
  std::string reduction_note_;
  double exposed_wait_seconds_ = 0;
};

}  // namespace ndt
