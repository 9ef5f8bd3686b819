// Parameters: each knows its logical (unsharded) shape and its placement on each
// mesh axis, as in DTensor. Values and gradients of all parameters live in two flat
// arenas (one allocation each) so the optimizer, gradient clipping and bucketed
// communication can walk them as one buffer.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

// How a parameter lies on one mesh axis: the same on every rank, or split along a
// tensor dim.
struct Placement {
  enum class Kind { replicate, shard };
  std::string mesh_axis;  // "dp_shard", "tp", ...
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
  // Tensor parallelism: the tensor dim split over the tp axis (-1: replicated), and,
  // for a replicated parameter, whether it is used inside a tensor-parallel region
  // (on this rank's heads only, as QK-norm is), so its gradient is a partial sum over tp.
  int tp_dim = -1;
  bool tp_region = false;
};

struct Parameter {
  ParameterSpec spec;
  std::vector<Placement> placements;  // empty: replicated on every axis
  Shape local_shape;                  // shape of this rank's block
  Shape local_offset;                 // where that block starts in the logical tensor
  int64_t arena_offset = 0;           // element offset in the arenas
  Tensor value;                       // view into the value arena
  Tensor grad;                        // view into the gradient arena

  const std::string& name() const { return spec.name; }
  int64_t numel() const { return shape_numel(local_shape); }
  float* data() const { return value.data<float>(); }
  float* grad_data() const { return grad.data<float>(); }
};

class ParameterStore {
 public:
  // Lays out unsharded (replicated) parameters in declaration order and initialises
  // them from the counter-based RNG: element i of a normal parameter is
  // normal_at(seed, hash_name(name), i) * std, whatever rank or shard holds it.
  // materialize = false allocates nothing: a sharded layout (FSDP) initialises its own
  // shards with init_parameter_block and points the views at gathered buffers.
  // With tp_size > 1 each parameter with a tp_dim holds only block tp_rank of that dim
  // (local_shape, local_offset; placement Shard(tp_dim) on "tp").
  ParameterStore(const std::vector<ParameterSpec>& specs, uint64_t seed, bool materialize = true, int tp_rank = 0,
                 int tp_size = 1);
  uint64_t seed() const { return seed_; }

  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  const Parameter& get(const std::string& name) const;
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  int64_t numel() const { return numel_; }
  // Zeroes the gradient arena, allocating it first (it is not allocated until the first
  // call, nor after release_grads()).
  void zero_grads();
  // Frees the gradient arena (ZeRO-2 keeps only gradient shards between steps); the
  // parameters' grad views are empty until the next zero_grads().
  void release_grads();
  bool has_grads() const { return grads_.defined(); }
  // Frees the value arena (FSDP keeps parameter shards elsewhere and points each
  // parameter's value view at gathered buffers while it computes).
  void release_values();

 private:
  void point_grads();

  std::vector<Parameter> params_;
  uint64_t seed_;
  int64_t numel_ = 0;
  Tensor values_;
  Tensor grads_;
};

// Fills a parameter block from its logical position (used at construction; exposed so
// a sharded layout initialises each shard to the same values as the whole tensor).
void init_parameter_block(float* out, const ParameterSpec& spec, const Shape& local_shape,
                          const Shape& local_offset, uint64_t seed);

}  // namespace ndt
