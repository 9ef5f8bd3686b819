// Sharded gradients and parameters: ZeRO stage 2 and stage 3 (FSDP), with HSDP.
// Splits: the batch over "dp"; every parameter's gradient and AdamW moments (stage 2),
// and the parameter itself (stage 3), along dim 0 over dp_shard
// (parallel/data/shard_layout.h; placement Shard(0) on dp_shard), replicated over
// dp_replicate. Under context parallelism "dp_shard" is dp_shard x cp (the
// communicator dp_shard_cp, placement Shard(0) on it): cp ranks hold the same
// parameters, as torchtitan shards over its dp_shard_cp mesh. Under expert parallelism
// the routed experts (this rank's E / ep of them, Shard(0) on ep) are sharded further
// along dim 0 over edp_shard, the dp_shard ranks holding the same experts (dp_shard /
// ep of them), as torchtitan and DeepSpeed-MoE do: every collective below then runs
// once per group of ranks, the experts' over edp_shard, never mixing the two.
// Communicates, per group of units (parallelize() makes each block a group, and the
// embedding with the head the root group, as torchtitan wraps each block and then the
// whole model): after the group's backward, a reduce-scatter of its gradients (then, for HSDP, an
// all-reduce of the shards over dp_replicate on the last micro-step). Stage 3 also
// all-gathers a unit's parameters just before its forward and again before its
// backward, the next unit's all-gather started first (prefetch): about 1.5x DDP's
// volume. Stage 2 keeps parameters whole and all-gathers the updated rows after the
// optimizer step: DDP's volume.
//
// A group's gradients live in a buffer allocated just before its first unit's backward
// and freed once they are packed for the reduce-scatter after its last, so no rank
// ever holds all gradients: that is the ZeRO-2 saving, in backward as well as between
// steps. Stage 3 frees a block's gathered parameters after its forward
// (reshard_after_forward; off keeps them until its backward: one all-gather less per
// block, more memory) and after its backward; the root group stays gathered from the
// start of forward to the end of backward (it is used at both ends, and a tied output
// layer is the embedding), as torchtitan leaves its root module.
// Which group a parameter belongs to is read from its unit (Parameter::unit).
// Memory of model states per rank after a step (n = dp_shard, the experts' n =
// dp_shard / ep, padded shards):
//   stage 2: params 4 Psi + grads 4 Psi / n + moments 8 Psi / n
//   stage 3: 16 Psi / n
// Gradients are reduce-scattered on every micro-step and summed into the shards
// (no_sync would need whole gradients kept between micro-steps, which is what
// sharding gradients is there to avoid).
// Frozen parameters (train.freeze, LoRA's base weights) are sharded and gathered like
// the others, but have no gradient buffer, gradient shard, reduce-scatter or moments
// (grad_layout_ holds the trainable parameters only), as FSDP2 does per parameter.
// Offload (docs/offload.md): with offload.optimizer = "disk" the moments live in swap
// files (8 Psi / n on disk instead of in memory: parallel/data/offloaded_moments.h); with
// offload.params = "disk" (stage 3) the parameter and gradient shards too
// (parallel/data/offloaded_shards.h): a group's shards are read from disk ahead of its
// all-gather, its gradient shards written after its reduce-scatter, and the model
// states in memory are the groups in flight only.
#pragma once

#include "comm/device_mesh.h"
#include "optim/adamw.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/data/offloaded_shards.h"
#include "parallel/data/shard_layout.h"
#include "parallel/data/sharded_adamw.h"

#include <vector>

namespace ndt {

// Units whose parameters are gathered and whose gradients are reduced together.
struct FsdpGroup {
  std::vector<int> units;
  // Stage 3: free the gathered parameters after each of its units' forward (else they
  // stay until the end of the group's backward).
  bool reshard_after_forward = true;
};

class FullyShardedDataParallel : public GradientSync {
 public:
  // stage 2 or 3; every unit of the store in exactly one group. Stage 2 needs the
  // store's parameters materialised; stage 3 takes them over if they are, or
  // initialises its shards itself if not.
  // local_units (pipeline parallelism: the units this rank runs; empty: all): a group's
  // lowest local unit ends its backward, and its gradients stay whole over the step's
  // micro-batches (their backward passes interleave) until finish_backward
  // reduce-scatters them.
  // swap: the run's swap folder when offloading (its options say what: the moments, and
  // with options().params, stage 3's parameter and gradient shards); null: in memory.
  FullyShardedDataParallel(ParameterStore& store, DeviceMesh& mesh, int stage, const AdamWConfig& adamw,
                           const std::vector<FsdpGroup>& groups, bool prefetch,
                           const std::vector<char>& local_units = {}, DType reduce_dtype = DType::f32,
                           DType gather_dtype = DType::f32, offload::SwapSpace* swap = nullptr);

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void after_forward_only() override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  void poll() override;

  void zero_grads() override;
  void begin_backward(bool sync) override;
  void finish_backward() override;
  double grad_norm() override;
  void step(float lr, float grad_scale) override;
  size_t bucket_count() const override { return groups_.size(); }
  double exposed_wait_seconds() const override { return exposed_wait_seconds_; }
  // Stage 3's gathers at the moment a unit needs its group (forward, forward-only and
  // backward): already in flight (prefetched) or started then (on demand). No buckets.
  OverlapStats overlap_stats() const override { return {0, 0, gathers_prefetched_, gathers_on_demand_}; }
  std::vector<float> full_parameters() override;
  void update_reduced_gradient(size_t p, const std::function<void(float*, int64_t)>& fn) override;
  int64_t optimizer_steps() const override { return optimizer_.steps_taken(); }
  void set_optimizer_steps(int64_t steps) override { optimizer_.set_steps_taken(steps); }

  // Seconds spent waiting for all-gathers (prefetched ones included), summed over calls.
  double gather_wait_seconds() const { return gather_wait_seconds_; }

 protected:
  std::vector<StateSlice> layout_state_slices() override;

 private:
  struct Group {
    size_t index = 0;
    std::vector<int> units;
    int first_unit = 0;     // its lowest (local) unit: the last to run backward
    bool reshard_after_forward = true;
    ParamSlots slots;       // its parameters, at their offsets in a gathered buffer
    ParamSlots arena;       // the same parameters at their offsets in the store's value arena
    int64_t numel = 0;      // elements of the gathered buffer
    ParamSlots grad_slots;  // its trainable parameters, at their offsets in `grads`
    int64_t grad_numel = 0;
    Tensor values;          // gathered parameters (empty when resharded)
    Tensor compute;         // low precision: values rounded to the compute dtype, for the matmuls
    Tensor grads;           // full gradients (of the trainable parameters) during its backward
    // Its parameters travel in one all-gather per shard group (ShardLayout: the dense
    // parameters, the experts) and dtype: fp32, and with a low gather dtype the
    // matmul-only weights in that dtype.
    struct GatherPart {
      ParamSlots slots;  // offsets in the gathered buffer, as in `slots`
      int64_t segment = 0;
      int shard_group = ShardLayout::dense;
      DType dtype = DType::f32;
      Tensor send, recv;
      WorkHandle work;
    };
    std::vector<GatherPart> parts;
    bool gathering() const;
    // Its gradients in one reduce-scatter per shard group.
    struct ReducePart {
      ParamSlots slots;  // offsets in the gradient buffer, as in `grad_slots`
      int64_t segment = 0;
      int shard_group = ShardLayout::dense;
      Tensor send, recv;
      Tensor send_low, recv_low;  // low-precision reduction: what travels
      WorkHandle work;
    };
    std::vector<ReducePart> reduces;
    bool reducing = false;  // parameter offload: its gradients are yet to be written
  };
  Group& group_of(int unit) { return groups_[group_of_unit_[static_cast<size_t>(unit)]]; }
  bool shards_parameters() const { return stage_ == 3; }
  void need_gather(Group& g);  // counts the gather a unit now needs, then starts it
  void start_gather(Group& g);
  void finish_gather(Group& g);
  void release(Group& g);
  void point_values(Group& g, bool gathered);
  void point_grads(Group& g, bool allocated);
  void start_reduce(Group& g);  // packs the group's gradients, starts their reduce-scatter, frees them
  void finish_reduce(Group& g);
  void finish_reduce(Group& g, Group::ReducePart& part);
  // Parameter offload: where this rank's shard of parameter p is (the group's read buffer),
  // and the reads of the next offload.prefetch units' groups in the order they run.
  const float* param_shard(Group& g, size_t p);
  float* grad_shard(Group& g, size_t p);
  void read_ahead(int unit, int direction);
  // The group's reduce-scatter and all-gather parts (per shard group; the gathers also
  // per dtype: matmul-only weights in gather_dtype).
  void plan_collectives(Group& g, DType gather_dtype);
  void initialise_shards(ParameterStore& store);
  // Parameter offload: the shards in swap files (offloaded_shards.h), initialised there.
  void offload_shards(ParameterStore& store, offload::SwapSpace& swap);
  void initialise_offloaded_shards(ParameterStore& store);
  // The communicator of a shard group: dp_shard_cp, or edp_shard for the experts.
  Communicator& comm_of(int shard_group) { return shard_group == ShardLayout::experts ? expert_shard_comm_ : shard_comm_; }

  ParameterStore& store_;
  Communicator& shard_comm_;         // dp_shard_cp
  Communicator& expert_shard_comm_;  // edp_shard (dp_shard_cp itself with ep = 1)
  Communicator& replicate_comm_;
  int stage_;
  bool prefetch_;
  DType reduce_dtype_;  // of the reduce-scatter (parallel/data/low_precision_comm.h)
  bool pipelined_;
  ShardLayout layout_;       // every parameter: the parameter shards and their gathers
  ShardLayout grad_layout_;  // the trainable ones: gradient shards, reductions, moments
  ShardedAdamW optimizer_;
  std::vector<Group> groups_;
  std::vector<size_t> group_of_unit_;
  Tensor param_shards_, grad_shards_;  // in memory (without parameter offload)
  std::unique_ptr<OffloadedShards> offloaded_;  // offload.params = "disk"
  int prefetch_units_ = 0;                      // its offload.prefetch
  bool sync_ = true;
  double exposed_wait_seconds_ = 0, gather_wait_seconds_ = 0;
  int64_t gathers_prefetched_ = 0, gathers_on_demand_ = 0;
};

}  // namespace ndt
