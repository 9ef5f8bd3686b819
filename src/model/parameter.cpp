#include "model/parameter.h"

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

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

int Parameter::shard_dim(Axis axis) const {
  for (const Placement& p : placements) {
    if (p.axis == axis && p.kind == Placement::Kind::shard) return p.dim;
  }
  return -1;
}

bool Parameter::grad_partial_on(Axis axis) const {
  return std::find(grad_partial.begin(), grad_partial.end(), axis) != grad_partial.end();
}

ParameterStore::ParameterStore(const std::vector<ParameterSpec>& specs, uint64_t seed, bool materialize)
    : seed_(seed) {
  for (const ParameterSpec& spec : specs) {
    NDT_CHECK(params_.empty() || spec.unit >= params_.back().unit(),
              "parameter {} of unit {} follows one of unit {}: a unit's parameters must be contiguous", spec.name,
              spec.unit, params_.back().unit());
    Parameter p;
    p.spec = spec;
    p.local_shape = spec.logical_shape;
    p.local_offset = Shape(spec.logical_shape.size(), 0);
    params_.push_back(std::move(p));
    num_units_ = std::max(num_units_, spec.unit + 1);
  }
  lay_out_arena();
  if (materialize) this->materialize();
}

namespace {

// Where each unit begins in an arena whose parameters begin at offset(p) and which
// holds `total` elements: a unit without parameters there begins where the next one does.
template <typename Offset>
std::vector<int64_t> unit_begins(const std::vector<Parameter>& params, int units, int64_t total, Offset offset) {
  std::vector<int64_t> begin(static_cast<size_t>(units) + 1, -1);
  for (const Parameter& p : params) {
    if (begin[static_cast<size_t>(p.unit())] < 0) begin[static_cast<size_t>(p.unit())] = offset(p);
  }
  begin.back() = total;
  for (int u = units - 1; u >= 0; --u) {
    if (begin[static_cast<size_t>(u)] < 0) begin[static_cast<size_t>(u)] = begin[static_cast<size_t>(u) + 1];
  }
  return begin;
}

}  // namespace

void ParameterStore::lay_out_arena() {
  int64_t total = 0, trainable = 0;
  for (Parameter& p : params_) {
    p.arena_offset = total;
    p.grad_offset = trainable;
    total += p.numel();
    if (p.trainable()) trainable += p.numel();
  }
  numel_ = total;
  grad_numel_ = trainable;
  unit_begin_ = unit_begins(params_, num_units_, total, [](const Parameter& p) { return p.arena_offset; });
  // A frozen parameter's grad_offset is where the next trainable one begins, so a unit
  // of frozen parameters only begins where the next unit's trainable ones do.
  unit_grad_begin_ = unit_begins(params_, num_units_, trainable, [](const Parameter& p) { return p.grad_offset; });
}

void ParameterStore::split_blocks(Axis axis, int rank, int size) {
  NDT_CHECK(!values_.defined(), "split_blocks on {}: the parameters are already materialised", axis_name(axis));
  for (Parameter& p : params_) {
    const int d = p.shard_dim(axis);
    if (d < 0 || size == 1) continue;
    NDT_CHECK(p.spec.logical_shape[d] % size == 0, "parameter {}: dim {} of size {} does not split over {} = {}",
              p.name(), d, p.spec.logical_shape[d], axis_name(axis), size);
    p.local_shape[d] = p.spec.logical_shape[d] / size;
    p.local_offset[d] = p.local_shape[d] * rank;
  }
  lay_out_arena();
}

void ParameterStore::keep_only(const std::function<bool(const Parameter&)>& held) {
  NDT_CHECK(!values_.defined(), "keep_only: the parameters are already materialised");
  for (Parameter& p : params_) {
    if (!held(p)) p.local_shape[0] = 0, p.local_offset.assign(p.local_offset.size(), 0);
  }
  lay_out_arena();
}

void ParameterStore::materialize() {
  values_ = Tensor::empty({numel_}, DType::f32, MemTag::params);
  for (Parameter& p : params_) {
    p.value = values_.slice(p.arena_offset, p.arena_offset + p.numel()).view(p.local_shape);
    init_parameter_block(p.data(), p.spec, p.local_shape, p.local_offset, seed_);
  }
  allocate_compute();
}

void ParameterStore::set_compute_dtype(DType dtype) {
  NDT_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
            "parameters compute in f32, bf16 or f16, not {}", dtype_name(dtype));
  compute_dtype_ = dtype;
  allocate_compute();
}

void ParameterStore::allocate_compute() {
  compute_ = Tensor();
  if (compute_dtype_ == DType::f32 || !values_.defined()) {
    for (Parameter& p : params_) p.compute = Tensor();
    return;
  }
  compute_ = Tensor::empty({numel_}, compute_dtype_, MemTag::params);
  for (Parameter& p : params_) p.compute = compute_.slice(p.arena_offset, p.arena_offset + p.numel()).view(p.local_shape);
  refresh_compute();
}

void ParameterStore::refresh_compute() {
  if (!compute_.defined()) return;
  kernels::cast_to_lowp(compute_dtype_, values_.data<float>(), static_cast<uint16_t*>(compute_.raw()), numel_);
}

void ParameterStore::point_grads() {
  for (Parameter& p : params_) {
    p.grad = grads_.defined() && p.trainable()
                 ? grads_.slice(p.grad_offset, p.grad_offset + p.numel()).view(p.local_shape)
                 : Tensor();
  }
}

void ParameterStore::zero_grads() {
  const kernels::ProfileScope scope(kernels::OpClass::elementwise);
  if (!grads_.defined()) {
    grads_ = Tensor::empty({grad_numel_}, DType::f32, MemTag::grads);
    point_grads();
  }
  grads_.zero_();
}

void ParameterStore::release_values() {
  values_ = Tensor();
  compute_ = Tensor();
  for (Parameter& p : params_) p.value = Tensor(), p.compute = Tensor();
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
