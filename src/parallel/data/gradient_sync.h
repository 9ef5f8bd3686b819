// GradientSync: how the data-parallel ranks combine gradients and apply the optimizer
// for one training step. The trainer drives every layout through this one interface:
//   zero_grads() -> begin_backward(sync) -> units' forward/backward (hooks around each
//   unit, poll between kernels) -> finish_backward() -> grad_norm() -> step(lr, clip factor)
// Implementations: DataParallel (replicated; one rank is the case dp = 1), ZeroStage1
// (ZeRO stage 1, HSDP) and FullyShardedDataParallel (ZeRO stages 2 and 3 / FSDP, HSDP).
// parallelize() (parallel/parallelize.h) picks and builds one.
#pragma once

#include "model/hooks.h"
#include "model/parameter.h"
#include "parallel/data/state_slice.h"
#include "parallel/tensor/megatron_regions.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace ndt {

// What must happen for communication to overlap computation, counted over the run
// (cumulative, every micro-step; plain integer increments). Correctness does not see
// these: a layout that communicates late or gathers the wrong unit still computes
// the same numbers, only slower, so tests assert the counts.
struct OverlapStats {
  // DDP and ZeRO-1 (BucketScheduler): gradient buckets launched during backward (from
  // after_backward, as soon as their gradients are final) vs only at the end, in
  // finish_backward's wait. A sync micro-step launches every bucket during backward
  // (after unit 0's backward the whole arena is final); a no_sync one launches none,
  // and neither does a layout with nothing to communicate (one rank).
  int64_t buckets_in_backward = 0;
  int64_t buckets_at_finish = 0;
  // FSDP stage 3: all-gathers a unit needed (before its forward or backward, its group
  // not gathered) that were already in flight (prefetched by the unit before it) vs
  // started at that moment (on demand). With the root group (embedding + head) and one
  // group per block, one forward + backward of L blocks makes 1 on-demand (the root,
  // at the start of forward) + 2L prefetched gathers with prefetch and
  // reshard_after_forward on; 1 + 2L on demand without prefetch. Without
  // reshard_after_forward the blocks stay gathered for their backward: forward's 1 + L
  // only (L of them prefetched with prefetch on), none in backward. Forward-only passes
  // (evaluation) count their gathers too: 1 on demand + L prefetched.
  int64_t gathers_prefetched = 0;
  int64_t gathers_on_demand = 0;
};

class GradientSync : public ModelHooks {
 public:
  // At the start of a step: gradients (full or sharded) to zero.
  virtual void zero_grads() = 0;
  // Before each micro-step's backward; sync = false (no_sync) only accumulates locally.
  virtual void begin_backward(bool sync) = 0;
  // After each micro-step's backward: on a sync step, completes the communication.
  virtual void finish_backward() = 0;
  // The global L2 norm of the (combined) gradients, each element counted once.
  virtual double grad_norm() = 0;
  // The optimizer update with learning rate lr, gradients multiplied by grad_scale.
  virtual void step(float lr, float grad_scale) = 0;
  virtual size_t bucket_count() const = 0;
  // How the data-parallel reduction runs beyond the defaults, for the run header ("" for
  // nothing to add): e.g. DDP's two-level reduction across nodes.
  virtual std::string describe_reduction() const { return ""; }
  // Seconds spent in finish_backward() waiting for communication, summed over calls:
  // the communication backward did not hide.
  virtual double exposed_wait_seconds() const = 0;
  // Counters of communication started early enough to overlap (above), over the run.
  virtual OverlapStats overlap_stats() const = 0;
  // Every parameter's full value, in arena order (collective when parameters are sharded);
  // under tensor parallelism, this rank's tp blocks (gather_tensor_parallel joins them).
  virtual std::vector<float> full_parameters() = 0;
  // Calls fn on parameter p's gradient as finish_backward() has reduced it (grad, numel):
  // the whole gradient (DDP) or this rank's padded shard of it (ZeRO), changed in place
  // (read from and written back to its swap file under parameter offload). Two ranks
  // holding the same parameter with the same layout hold the same part. Not called for
  // a frozen parameter (it has no gradient).
  virtual void update_reduced_gradient(size_t p, const std::function<void(float* grad, int64_t numel)>& fn) = 0;

  // Tensor parallelism, read from the placements: the norm adds the squares of
  // gradients sharded on tp over tp and counts those of parameters replicated over tp
  // (the same gradient on every tp rank) on tp rank 0 only; checkpoints save the
  // replicated ones from tp rank 0.
  void set_tensor_parallel(const ParameterStore& store, const TensorParallel& tp);

  // Pipeline parallelism: the norm also sums over the pp ranks (each holds its stages'
  // parameters); parameters a stage holds as a copy of another stage's
  // (Parameter::pipeline_copy: a tied embedding on the last stage) are neither counted
  // nor saved here. After set_tensor_parallel.
  void set_pipeline(const ParameterStore& store, Communicator* pp);

  // Expert parallelism (ep > 1): the norm adds the squares of gradients sharded on ep
  // (each ep rank holds other experts) over ep, before tp and pp.
  void set_expert_parallel(Communicator* ep) { ep_ = ep; }

  // Checkpoints: every slice of parameters and moments this rank holds (of state
  // replicated over tp, tp rank 0's copy is the saved one), and AdamW's step count.
  std::vector<StateSlice> state_slices();
  virtual int64_t optimizer_steps() const = 0;
  virtual void set_optimizer_steps(int64_t steps) = 0;

 protected:
  // One entry per parameter: whether this rank counts its gradient in the norm; null
  // when it counts every parameter alike (no tensor, pipeline or expert parallelism).
  const std::vector<char>* counted_in_norm() const { return tp_.active() || pp_ || ep_ ? &counted_ : nullptr; }
  // The global norm from this rank's counted sums of squares (already summed over dp),
  // of the gradients sharded on ep apart (summed over ep here) and of all others.
  double finish_norm(double sum_of_squares, double sharded_on_ep = 0) const;
  // This layout's slices, before the tp rule of state_slices().
  virtual std::vector<StateSlice> layout_state_slices() = 0;

 private:
  TensorParallel tp_;
  Communicator* pp_ = nullptr;
  Communicator* ep_ = nullptr;
  std::vector<char> counted_;
};

}  // namespace ndt
