// GradientSync: how the data-parallel ranks combine gradients and apply the optimizer
// for one training step. The trainer drives every layout through this one interface:
//   zero_grads() -> begin_backward(sync) -> model forward/backward (hooks: grads_ready_from, poll) ->
//   finish_backward() -> grad_norm() -> step(lr, clip factor)
// Implementations: DataParallel (replicated; one rank is the case dp = 1),
// ZeroDataParallel (ZeRO stage 1, HSDP) and FullyShardedDataParallel (ZeRO stages 2 and
// 3 / FSDP, HSDP).
#pragma once

#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/tensor_parallel.h"

#include <memory>

#include <cstddef>
#include <vector>

namespace ndt {

// A box of training state this rank holds, for checkpoints: rows [row_begin, row_end)
// (dim 0) of this rank's tensor-parallel block of a parameter, as its value or one of
// its AdamW moments, contiguous at data. saved: this rank writes it (state replicated
// over ranks is written by one of them); every rank reads all of its slices on load.
struct StateSlice {
  enum Kind { value, exp_avg, exp_avg_sq };
  Kind kind;
  const Parameter* param;
  int64_t row_begin, row_end;
  float* data;
  bool saved;
  // The checkpoint's tensor name: the parameter's, or "optim.exp_avg.<name>" / "optim.exp_avg_sq.<name>".
  std::string tensor_name() const;
  // The box in the logical tensor.
  Shape offset() const;
  Shape shape() const;
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
  // Seconds spent in finish_backward() waiting for communication, summed over calls:
  // the communication backward did not hide.
  virtual double exposed_wait_seconds() const = 0;
  // Every parameter's full value, in arena order (collective when parameters are sharded);
  // under tensor parallelism, this rank's tp blocks (gather_tensor_parallel joins them).
  virtual std::vector<float> full_parameters() = 0;

  // Tensor parallelism: the norm adds the squares of tp-split gradients over tp and
  // counts those of parameters replicated over tp (the same gradient on every tp rank)
  // on tp rank 0 only.
  void set_tensor_parallel(const ParameterStore& store, const TensorParallel& tp);

  // Checkpoints: every slice of parameters and moments this rank holds (of state
  // replicated over tp, tp rank 0's copy is the saved one), and AdamW's step count.
  std::vector<StateSlice> state_slices();
  virtual int64_t optimizer_steps() const = 0;
  virtual void set_optimizer_steps(int64_t steps) = 0;

 protected:
  // One entry per parameter: whether this rank counts its gradient in the norm; null
  // when it counts every parameter (no tensor parallelism).
  const std::vector<char>* counted_in_norm() const { return tp_.active() ? &counted_ : nullptr; }
  // The global norm from this rank's counted sum of squares (already summed over dp).
  double finish_norm(double sum_of_squares) const;
  // This layout's slices, before the tp rule of state_slices().
  virtual std::vector<StateSlice> layout_state_slices() = 0;

 private:
  TensorParallel tp_;
  std::vector<char> counted_;
};

class DeviceMesh;

struct DataParallelOptions {
  int zero_stage = 0;  // 0: DDP, 1-2: ZeRO, 3: FSDP
  size_t bucket_bytes = 25u << 20;
  bool reshard_after_forward = true;
  bool prefetch = true;
  AdamWConfig adamw;
  TensorParallel tp;  // the model's tensor-parallel group (for the gradient norm)
};

// The GradientSync for a stage over the mesh's dp axes (mesh == nullptr: one rank, DDP
// without communication).
std::unique_ptr<GradientSync> make_gradient_sync(ParameterStore& store, DeviceMesh* mesh,
                                                 const DataParallelOptions& options);

}  // namespace ndt
