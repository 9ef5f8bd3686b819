// Parameters: each knows its logical (unsharded) shape and its placement on each
// mesh axis, as in DTensor. Values and gradients of all parameters live in two flat
// arenas (one allocation each) so the optimizer, gradient clipping and bucketed
// communication can walk them as one buffer.
#pragma once

#include "core/axis.h"
#include "core/tensor.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ndt {

// How a tensor lies on one mesh axis, as in DTensor: the same on every rank
// (Replicate), split along a tensor dim (Shard), or a part of a sum over the axis's
// ranks (Partial: a gradient before its reduction).
struct Placement {
  enum class Kind { replicate, shard, partial };
  Axis axis = Axis::tp;
  Kind kind = Kind::replicate;
  int dim = 0;  // tensor dim split, when kind == shard
};

enum class InitKind { normal, zeros, ones };

struct ParameterSpec {
  std::string name;
  Shape logical_shape;
  InitKind init = InitKind::normal;
  float init_std = 0.0f;
  bool weight_decay = true;
  // What the layer using it declares for tensor parallelism (parallelize() turns this
  // into placements; nothing else reads it): the tensor dim a Megatron layer splits
  // over tp (-1: replicated), and, for a replicated parameter, whether it is used
  // inside a tensor-parallel region (on this rank's heads only, as QK-norm is), so its
  // gradient is a partial sum over tp.
  int tp_dim = -1;
  bool tp_region = false;
  // The model unit that owns it (model/unit.h: 0 the embedding, 1 + l block l, the last
  // the head). A unit's parameters are contiguous, in unit order.
  int unit = 0;
  // A routed expert's weight ([experts, ...]): dim 0 indexes the experts, which expert
  // parallelism splits over ep (parallel/expert/expert_parallel.h). Its tp_dim is then 1 or 2.
  bool expert = false;
  // Fine-tuning (train.freeze, LoRA's base weights): the value is read, never updated.
  // A frozen parameter has no gradient (its grad view stays empty: layers compute no
  // weight gradient for it, though the input gradient still flows through it), no
  // optimizer state and no gradient communication.
  bool frozen = false;
};

struct Parameter {
  ParameterSpec spec;
  // The value's placement on each mesh axis it is not replicated on (absent: Replicate),
  // e.g. [Shard(0) on tp, Shard(0) on dp_shard] for a column-parallel weight under FSDP.
  std::vector<Placement> placements;
  // The gradient as backward leaves it on this rank: Partial on each of these axes (a
  // part of the sum over the axis's ranks), which the layout then reduces.
  std::vector<Axis> grad_partial;
  // Pipeline parallelism: this rank holds the parameter as a copy of another stage's
  // (a tied embedding on the last stage): kept equal by summing the two gradients.
  bool pipeline_copy = false;
  Shape local_shape;                  // shape of this rank's block (tp split applied)
  Shape local_offset;                 // where that block starts in the logical tensor
  int64_t arena_offset = 0;           // element offset in the value (and compute) arena
  // Element offset in the gradient arena, which holds the trainable parameters only (a
  // frozen one's offset is where the next trainable one begins; it has no elements there).
  int64_t grad_offset = 0;
  Tensor value;                       // view into the value arena
  Tensor grad;                        // view into the gradient arena (empty when frozen)
  // Low-precision compute (model/precision.h): the value rounded to the compute dtype
  // (bf16 or f16 bits), what the matmuls read; undefined in fp32.
  Tensor compute;

  const std::string& name() const { return spec.name; }
  int unit() const { return spec.unit; }
  bool trainable() const { return !spec.frozen; }
  int64_t numel() const { return shape_numel(local_shape); }
  float* data() const { return value.data<float>(); }
  float* grad_data() const { return grad.data<float>(); }
  // Where a layer adds this parameter's gradient: grad_data(), or null for a frozen
  // parameter (the layer then computes no weight gradient for it).
  float* trainable_grad() const { return trainable() ? grad_data() : nullptr; }
  const uint16_t* compute_data() const { return static_cast<const uint16_t*>(compute.raw()); }
  // The tensor dim split over `axis`, or -1 if the value is not sharded there.
  int shard_dim(Axis axis) const;
  bool sharded_on(Axis axis) const { return shard_dim(axis) >= 0; }
  bool grad_partial_on(Axis axis) const;
};

class ParameterStore {
 public:
  // Declares the parameters in order, replicated (every block is the whole tensor), and
  // with materialize = true allocates and initialises them (materialize()). Without,
  // no memory exists yet: parallelize() first places them (split_blocks), then
  // materialises, or a sharded layout (FSDP) initialises its own shards with
  // init_parameter_block and points the views at gathered buffers.
  ParameterStore(const std::vector<ParameterSpec>& specs, uint64_t seed, bool materialize = true);
  uint64_t seed() const { return seed_; }

  // Each parameter whose placements shard it on `axis` keeps only block `rank` of
  // `size` along that dim (local_shape, local_offset; the dim must divide evenly).
  // Before materialize() only.
  void split_blocks(Axis axis, int rank, int size);
  // Pipeline parallelism: parameters for which `held` is false are not on this rank
  // (no elements: local_shape[0] = 0); the others keep their blocks. Before
  // materialize() only.
  void keep_only(const std::function<bool(const Parameter&)>& held);
  // Allocates the value arena for the local blocks and initialises each from its
  // logical position: element i of a normal parameter is normal_at(seed,
  // hash_name(name), i) * std, whatever rank or shard holds it.
  void materialize();

  // Units: how many, and where unit u's parameters begin in the value arena and its
  // trainable parameters in the gradient arena (units are contiguous and in order; a
  // unit without parameters begins where the next one does).
  int num_units() const { return num_units_; }
  int64_t unit_arena_begin(int unit) const { return unit_begin_[static_cast<size_t>(unit)]; }
  int64_t unit_grad_begin(int unit) const { return unit_grad_begin_[static_cast<size_t>(unit)]; }

  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  const Parameter& get(const std::string& name) const;
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  int64_t numel() const { return numel_; }
  // Elements of the gradient arena: the trainable parameters' (numel() without frozen ones).
  int64_t grad_numel() const { return grad_numel_; }
  bool has_frozen() const { return grad_numel_ != numel_; }
  // Zeroes the gradient arena, allocating it first (it is not allocated until the first
  // call, nor after release_grads()).
  void zero_grads();
  // Frees the gradient arena (ZeRO-2 keeps only gradient shards between steps); the
  // parameters' grad views are empty until the next zero_grads().
  void release_grads();
  bool has_grads() const { return grads_.defined(); }
  // Frees the value arena (FSDP keeps parameter shards elsewhere and points each
  // parameter's value view at gathered buffers while it computes), and the compute arena.
  void release_values();

  // Low-precision compute (model/precision.h): with dtype bf16 or f16 a compute arena
  // (2 bytes per element, ledger tag params) holds every value rounded to it, and each
  // parameter's compute view points into it. refresh_compute() recasts the arena from
  // the values: whoever changes values (an optimizer step, a load) calls it before the
  // next forward; the trainer does so at the start of each step. FSDP, which frees the
  // arenas, fills the compute views of the parameters it gathers itself.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_dtype_; }
  void refresh_compute();

 private:
  void point_grads();
  void lay_out_arena();
  void allocate_compute();

  std::vector<Parameter> params_;
  uint64_t seed_;
  int64_t numel_ = 0;
  int64_t grad_numel_ = 0;
  int num_units_ = 0;
  std::vector<int64_t> unit_begin_, unit_grad_begin_;
  Tensor values_;
  Tensor grads_;
  DType compute_dtype_ = DType::f32;
  Tensor compute_;
};

// Fills a parameter block from its logical position (used at construction; exposed so
// a sharded layout initialises each shard to the same values as the whole tensor).
void init_parameter_block(float* out, const ParameterSpec& spec, const Shape& local_shape,
                          const Shape& local_offset, uint64_t seed);

}  // namespace ndt
