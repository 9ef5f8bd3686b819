#include "model/fp8_linear.h"

#include "core/error.h"

#include <algorithm>

namespace ndt {

Fp8Linears::Fp8Linears(const ParameterStore& store, Fp8ScalingConfig config) : config_(config) {
  config_.power_of_two = true;
  config_.validate();
  int64_t largest = 0;
  for (const Parameter& p : store.params()) {
    if (p.name().rfind("blocks.", 0) != 0 || p.spec.logical_shape.size() != 2) continue;
    linear_of_[&p] = static_cast<int>(names_.size());
    names_.push_back(p.name());
    for (DType format : {DType::e4m3, DType::e4m3, DType::e5m2}) scales_.emplace_back(format, config_);
    largest = std::max(largest, p.numel());
  }
  step_amax_.assign(scales_.size(), 0.0f);
  weight_scratch_ = Tensor::empty({std::max<int64_t>(largest, 1)}, DType::bf16, MemTag::other);
}

int Fp8Linears::find(const Parameter& weight) const {
  const auto it = linear_of_.find(&weight);
  return it == linear_of_.end() ? -1 : it->second;
}

void Fp8Linears::quantize(int linear, Role role, const float* x, uint16_t* out, int64_t n) {
  const size_t i = index(linear, role);
  const float amax = amax_of(x, n);
  step_amax_[i] = std::isnan(amax) || std::isnan(step_amax_[i]) ? amax : std::max(step_amax_[i], amax);
  fake_quantize_fp8(scales_[i].format(), x, scales_[i].scale(), out, n);
}

void Fp8Linears::begin_step() { std::fill(step_amax_.begin(), step_amax_.end(), 0.0f); }

void Fp8Linears::finish_step() {
  for (size_t i = 0; i < scales_.size(); ++i) scales_[i].record(step_amax_[i]);
}

std::vector<float> Fp8Linears::state() const {
  std::vector<float> out;
  for (const DelayedScale& s : scales_) {
    out.insert(out.end(), s.amax_history().begin(), s.amax_history().end());
    out.push_back(s.scale());
  }
  return out;
}

void Fp8Linears::restore(const std::vector<float>& state) {
  const size_t per = static_cast<size_t>(config_.amax_history_len) + 1;
  NDT_CHECK(state.size() == per * scales_.size(),
            "the checkpoint's fp8 state holds {} values; {} fp8 tensors with precision.fp8_amax_history = {} need {}",
            state.size(), scales_.size(), config_.amax_history_len, per * scales_.size());
  for (size_t i = 0; i < scales_.size(); ++i) {
    const auto first = state.begin() + static_cast<std::ptrdiff_t>(i * per);
    scales_[i].restore({std::vector<float>(first, first + static_cast<std::ptrdiff_t>(per) - 1), *(first + per - 1)});
  }
}

}  // namespace ndt
