#include "model/parameter.h"

#include "core/error.h"
#include "core/rng.h"

#include <algorithm>

namespace ndt {

void init_parameter_block(float* out, const ParameterSpec& spec, const Shape& local_shape,
                          const Shape& local_offset, uint64_t seed) {
  int64_t n = shape_numel(local_shape);
  if (spec.init != InitKind::normal) {
    std::fill(out, out + n, spec.init == InitKind::ones ? 1.0f : 0.0f);
    return;
  }
  const uint64_t stream = hash_name(spec.name);
  // The block is a sequence of contiguous runs along the last dim; each run starts at
  // a computable logical index.
  const int nd = static_cast<int>(local_shape.size());
  const int64_t run = local_shape.empty() ? 1 : local_shape.back();
  const int64_t runs = run == 0 ? 0 : n / run;
  for (int64_t r = 0; r < runs; ++r) {
    int64_t rem = r, logical = 0, stride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      int64_t local_idx = d == nd - 1 ? 0 : rem % local_shape[d];
      if (d != nd - 1) rem /= local_shape[d];
      logical += (local_idx + local_offset[d]) * stride;
      stride *= spec.logical_shape[d];
    }
    fill_normal(out + r * run, run, logical, 0.0f, spec.init_std, seed, stream);
  }
}

ParameterStore::ParameterStore(const std::vector<ParameterSpec>& specs, uint64_t seed, bool materialize, int tp_rank,
                               int tp_size)
    : seed_(seed) {
  int64_t total = 0;
  for (const ParameterSpec& spec : specs) {
    Parameter p;
    p.spec = spec;
    p.local_shape = spec.logical_shape;
    p.local_offset = Shape(spec.logical_shape.size(), 0);
    if (tp_size > 1 && spec.tp_dim >= 0) {
      const int d = spec.tp_dim;
      NDT_CHECK(spec.logical_shape[d] % tp_size == 0, "parameter {}: dim {} of size {} does not split over tp = {}",
                spec.name, d, spec.logical_shape[d], tp_size);
      p.local_shape[d] = spec.logical_shape[d] / tp_size;
      p.local_offset[d] = p.local_shape[d] * tp_rank;
      p.placements.push_back(Placement{"tp", Placement::Kind::shard, d});
    }
    p.arena_offset = total;
    total += p.numel();
    params_.push_back(std::move(p));
  }
  numel_ = total;
  if (!materialize) return;
  values_ = Tensor::empty({total}, DType::f32, MemTag::params);
  for (Parameter& p : params_) {
    p.value = values_.slice(p.arena_offset, p.arena_offset + p.numel()).view(p.local_shape);
    init_parameter_block(p.data(), p.spec, p.local_shape, p.local_offset, seed);
  }
}

void ParameterStore::point_grads() {
  for (Parameter& p : params_) {
    p.grad = grads_.defined() ? grads_.slice(p.arena_offset, p.arena_offset + p.numel()).view(p.local_shape)
                              : Tensor();
  }
}

void ParameterStore::zero_grads() {
  if (!grads_.defined()) {
    grads_ = Tensor::empty({numel_}, DType::f32, MemTag::grads);
    point_grads();
  }
  grads_.zero_();
}

void ParameterStore::release_values() {
  values_ = Tensor();
  for (Parameter& p : params_) p.value = Tensor();
}

void ParameterStore::release_grads() {
  grads_ = Tensor();
  point_grads();
}

const Parameter& ParameterStore::get(const std::string& name) const {
  for (const Parameter& p : params_) {
    if (p.name() == name) return p;
  }
  fail("no parameter named \"{}\"", name);
}

}  // namespace ndt
