// Sharded optimizer states: ZeRO stage 1, and HSDP.
// Splits: the batch over "dp" (dp_replicate x dp_shard); AdamW's moments along dim 0
// of every parameter over dp_shard (parallel/data/shard_layout.h); parameters and
// gradients stay whole on every rank. Under context parallelism "dp_shard" below is
// dp_shard x cp (the communicator dp_shard_cp): cp ranks hold the same parameters.
// Under expert parallelism the routed experts (this rank's E / ep of them) are sharded
// the same way over edp_shard, the dp_shard ranks holding the same experts; a bucket
// never mixes them with the other parameters.
// Communicates: gradients reduce-scattered over dp_shard (experts: edp_shard) per
// bucket, each started as soon as backward has finished its gradients (and, for HSDP,
// the shards all-reduced over dp_replicate); after the update, the parameter shards
// all-gathered over the same groups. Per step that is the volume of DDP's ring
// all-reduce.
//
// Memory of model states per rank (fp32, Psi parameters, n = dp_shard, the experts'
// n = dp_shard / ep), after a step:
//   params 4 Psi + grads 4 Psi + moments 8 Psi / n
// (plus each shard's padding to ceil(rows / n) rows). The gradient shards the
// reduce-scatter produces exist from backward to the update only. Stages 2 and 3 are
// in parallel/data/fsdp.h. With offload.optimizer = "disk" the moments are on disk
// (parallel/data/offloaded_moments.h) and streamed through the update.
#pragma once

#include "comm/device_mesh.h"
#include "optim/adamw.h"
#include "parallel/data/buckets.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/data/shard_layout.h"
#include "parallel/data/sharded_adamw.h"

#include <vector>

namespace ndt {

class ZeroStage1 : public GradientSync {
 public:
  // reduce_dtype: f32, or bf16 / f16 for the reduce-scatter (parallel/data/low_precision_comm.h;
  // HSDP's all-reduce over replicas stays fp32).
  // swap: offload.optimizer = "disk" (the moments in this rank's swap files); null: in memory.
  ZeroStage1(ParameterStore& store, DeviceMesh& mesh, size_t bucket_bytes, const AdamWConfig& adamw,
             DType reduce_dtype = DType::f32, offload::SwapSpace* swap = nullptr);

  void begin_backward(bool sync) override;
  void after_backward(int unit) override;
  void poll() override;
  // Completes the reduce-scatters (and, for HSDP, the all-reduce of the shards over
  // replicas).
  void finish_backward() override;
  // Sums squares over this rank's shard and over dp_shard, the experts' over edp_shard
  // and then ep (replicas are not summed).
  double grad_norm() override;
  int64_t optimizer_steps() const override { return optimizer_.steps_taken(); }
  void set_optimizer_steps(int64_t steps) override { optimizer_.set_steps_taken(steps); }
  // AdamW on this rank's rows, then the all-gather of the updated parameters.
  void step(float lr, float grad_scale) override;
  size_t bucket_count() const override { return scheduler_.buckets().size(); }
  void zero_grads() override { store_.zero_grads(); }
  std::vector<float> full_parameters() override;
  void update_reduced_gradient(size_t p, const std::function<void(float*, int64_t)>& fn) override;
  double exposed_wait_seconds() const override { return exposed_wait_seconds_; }
  OverlapStats overlap_stats() const override {
    return {scheduler_.launched_in_backward(), scheduler_.launched_at_finish(), 0, 0};
  }

 protected:
  std::vector<StateSlice> layout_state_slices() override;

 private:
  WorkHandle launch(size_t bucket);
  void completed(size_t bucket);
  float* shard_segment(const GradientBucket& b);
  // The communicators each parameter's shards travel over (make_gradient_buckets' comms).
  std::vector<Communicator*> shard_comms() const;

  ParameterStore& store_;
  Communicator& shard_comm_;         // dp_shard_cp
  Communicator& expert_shard_comm_;  // edp_shard (dp_shard_cp itself with ep = 1)
  Communicator& replicate_comm_;
  ShardLayout layout_;
  BucketScheduler scheduler_;
  std::vector<ParamSlots> slots_;       // the parameters of each bucket, in the value arena
  std::vector<ParamSlots> grad_slots_;  // its trainable ones, in the gradient arena
  std::vector<Tensor> staging_;       // each bucket's packed reduce-scatter input, while in flight
  std::vector<Tensor> reduced_;       // low precision: each bucket's reduced shard, until widened
  DType reduce_dtype_;
  Tensor grad_shards_;                // [layout.arena_numel()]
  ShardedAdamW optimizer_;
  double exposed_wait_seconds_ = 0;
};

}  // namespace ndt
