#include "parallel/tensor_parallel.h"

#include "core/error.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vec_math.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ndt {

namespace {

constexpr int64_t kParallelMin = int64_t{1} << 15;  // elements below which a loop stays serial

// out[rows, C] += bias[C] on every row.
void add_bias(float* out, const float* bias, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    float* row = out + n * C;
    for (int64_t c = 0; c < C; ++c) row[c] += bias[c];
  }
}

// dbias[C] += sum over rows of dout (serial over rows: the order is fixed).
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t C) {
  for (int64_t n = 0; n < rows; ++n) {
    const float* row = dout + n * C;
    for (int64_t c = 0; c < C; ++c) dbias[c] += row[c];
  }
}

int rows_of(const Parameter& p) { return static_cast<int>(p.local_shape[0]); }
int cols_of(const Parameter& p) { return static_cast<int>(p.local_shape[1]); }

}  // namespace

void validate_tensor_parallel(const ModelConfig& c, int tp, bool sequence_parallel, int seq_len) {
  NDT_CHECK(tp >= 1, "parallel.tp = {} must be positive", tp);
  if (tp == 1) return;
  auto divides = [tp](const char* key, int value) {
    NDT_CHECK(value % tp == 0, "{} = {} is not divisible by parallel.tp = {}", key, value, tp);
  };
  divides("model.n_head", c.n_head);
  divides(c.arch == Arch::llama ? "model.n_kv_head" : "model.n_head (the K/V heads of gpt2)", c.kv_heads());
  divides("model.d_model", c.d_model);
  divides("model.d_ff", c.d_ff);
  divides("model.vocab_size", c.vocab_size);
  if (sequence_parallel) divides("train.seq_len (sequence parallel splits tokens)", seq_len);
}

std::vector<ParameterSpec> local_parameter_specs(std::vector<ParameterSpec> specs, int tp) {
  for (ParameterSpec& s : specs) {
    if (tp > 1 && s.tp_dim >= 0) s.logical_shape[s.tp_dim] /= tp;
  }
  return specs;
}

void ColumnParallelLinear::forward(float* out, const float* inp, int64_t rows) const {
  cpu::linear_forward(out, inp, weight->data(), bias ? bias->data() : nullptr, static_cast<int>(rows),
                      cols_of(*weight), rows_of(*weight));
}

void ColumnParallelLinear::backward(float* dinp, const float* dout, const float* inp, int64_t rows) const {
  cpu::linear_backward(dinp, weight->grad_data(), bias ? bias->grad_data() : nullptr, dout, inp, weight->data(),
                       static_cast<int>(rows), cols_of(*weight), rows_of(*weight));
}

void RowParallelLinear::forward(float* out, float* partial, const float* inp, int64_t rows) const {
  const int OC = rows_of(*weight), IC = cols_of(*weight);
  const float* b = bias ? bias->data() : nullptr;
  if (!tp.active()) {
    cpu::linear_forward(out, inp, weight->data(), b, static_cast<int>(rows), IC, OC);
    return;
  }
  cpu::linear_forward(partial, inp, weight->data(), nullptr, static_cast<int>(rows), IC, OC);
  float* y = row_parallel_output_forward(tp, partial, out, tp.local_rows(rows), OC);
  if (y != out) std::memcpy(out, y, static_cast<size_t>(tp.local_rows(rows) * OC) * 4);
  if (b) add_bias(out, b, tp.local_rows(rows), OC);
}

void RowParallelLinear::backward(float* dinp, float* dout_full, const float* dout, const float* inp, int64_t rows,
                                 float* dbias) const {
  const int OC = rows_of(*weight), IC = cols_of(*weight);
  if (dbias) bias_backward(dbias, dout, tp.local_rows(rows), OC);
  const float* dy = row_parallel_output_backward(tp, dout, dout_full, tp.local_rows(rows), OC);
  cpu::linear_backward(dinp, weight->grad_data(), nullptr, dy, inp, weight->data(), static_cast<int>(rows), IC, OC);
}

void vocab_parallel_embedding_forward(float* partial, const int32_t* ids, const float* table, int64_t vocab_begin,
                                      int64_t local_vocab, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t id = ids[n] - vocab_begin;
    float* out = partial + n * C;
    if (id >= 0 && id < local_vocab) {
      std::memcpy(out, table + id * C, static_cast<size_t>(C) * 4);
    } else {
      std::memset(out, 0, static_cast<size_t>(C) * 4);
    }
  }
}

void vocab_parallel_embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t vocab_begin,
                                       int64_t local_vocab, int64_t rows, int64_t C) {
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t id = ids[n] - vocab_begin;
    if (id < 0 || id >= local_vocab) continue;
    cpu::add_inplace(dtable + id * C, dout + n * C, C);
  }
}

void vocab_parallel_cross_entropy(const TensorParallel& tp, float* logits, float* losses, const int32_t* targets,
                                  int rows, int local_vocab, int64_t vocab_begin, float grad_scale, float* work) {
  if (!tp.active()) {
    cpu::softmax_cross_entropy(logits, losses, targets, rows, local_vocab, grad_scale);
    return;
  }
  const int64_t V = int64_t{local_vocab} * tp.size();
  for (int n = 0; n < rows; ++n) {
    NDT_CHECK(targets[n] >= 0 && targets[n] < V, "vocab_parallel_cross_entropy: target {} of row {} is outside [0, {})",
              targets[n], n, V);
  }
  float* row_max = work;           // [rows]
  float* sums = work + rows;       // [rows] sum of exp(logit - max), then [rows] target logits
  float* target_logit = sums + rows;
  const bool with_grad = grad_scale != 0.0f;
  const bool parallel = int64_t{rows} * local_vocab >= kParallelMin && rows > 1;
  const int V_local = local_vocab;

#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < rows; ++n) {
    const float* row = logits + int64_t{n} * V_local;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V_local; ++j) mx = row[j] > mx ? row[j] : mx;
    row_max[n] = mx;
  }
  tp_all_reduce(tp, row_max, rows, ReduceOp::max);

#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < rows; ++n) {
    float* row = logits + int64_t{n} * V_local;
    const float mx = row_max[n];
    const int64_t t = targets[n] - vocab_begin;
    target_logit[n] = t >= 0 && t < V_local ? row[t] : 0.0f;
    double sum = 0.0;
    if (with_grad) {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V_local; ++j) {
        const float e = cpu::exp_vec(row[j] - mx);
        row[j] = e;
        sum += e;
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V_local; ++j) sum += cpu::exp_vec(row[j] - mx);
    }
    sums[n] = static_cast<float>(sum);
  }
  tp_all_reduce(tp, sums, 2 * int64_t{rows}, ReduceOp::sum);  // sums and target logits together

#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < rows; ++n) {
    losses[n] = static_cast<float>(static_cast<double>(row_max[n]) + std::log(static_cast<double>(sums[n])) -
                                   static_cast<double>(target_logit[n]));
    if (!with_grad) continue;
    float* row = logits + int64_t{n} * V_local;
    const float f = static_cast<float>(grad_scale / static_cast<double>(sums[n]));
#pragma omp simd
    for (int j = 0; j < V_local; ++j) row[j] *= f;
    const int64_t t = targets[n] - vocab_begin;
    if (t >= 0 && t < V_local) row[t] -= grad_scale;
  }
}

bool has_partial_gradient(const TensorParallel& tp, const Parameter& p) {
  if (!tp.active() || p.spec.tp_dim >= 0) return false;
  return p.spec.tp_region || tp.sequence_parallel;
}

PartialGradients::PartialGradients(const TensorParallel& tp, const std::vector<const Parameter*>& params) : tp_(tp) {
  int64_t total = 0;
  for (const Parameter* p : params) {
    if (p == nullptr || !has_partial_gradient(tp, *p)) continue;
    params_.push_back(p);
    offsets_.push_back(total);
    total += p->numel();
  }
  buffer_.assign(static_cast<size_t>(total), 0.0f);
}

void PartialGradients::begin() { std::fill(buffer_.begin(), buffer_.end(), 0.0f); }

float* PartialGradients::grad(const Parameter* p) {
  if (p == nullptr) return nullptr;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i] == p) return buffer_.data() + offsets_[i];
  }
  return p->grad_data();
}

void PartialGradients::finish() {
  if (params_.empty()) return;
  tp_all_reduce(tp_, buffer_.data(), static_cast<int64_t>(buffer_.size()), ReduceOp::sum);
  for (size_t i = 0; i < params_.size(); ++i) {
    cpu::add_inplace(params_[i]->grad_data(), buffer_.data() + offsets_[i], params_[i]->numel());
  }
}

std::vector<float> gather_tensor_parallel(const ParameterStore& store, const float* local_values,
                                          const TensorParallel& tp) {
  int64_t total = 0;
  for (const Parameter& p : store.params()) total += shape_numel(p.spec.logical_shape);
  std::vector<float> full(static_cast<size_t>(total));
  float* out = full.data();
  const int n = tp.size();
  std::vector<float> blocks;
  for (const Parameter& p : store.params()) {
    const float* local = local_values + p.arena_offset;
    const int64_t numel = p.numel();
    if (!tp.active() || p.spec.tp_dim < 0) {
      std::memcpy(out, local, static_cast<size_t>(numel) * 4);
      out += numel;
      continue;
    }
    blocks.resize(static_cast<size_t>(numel * n));
    tp.comm->all_gather(local, blocks.data(), static_cast<size_t>(numel), DType::f32);
    // Rank r's block spans [r * size, (r + 1) * size) of tp_dim: for each index of the
    // dims before it, the ranks' contiguous runs follow each other.
    int64_t outer = 1;
    for (int d = 0; d < p.spec.tp_dim; ++d) outer *= p.local_shape[d];
    const int64_t run = outer == 0 ? 0 : numel / outer;
    for (int64_t o = 0; o < outer; ++o) {
      for (int r = 0; r < n; ++r) {
        std::memcpy(out, blocks.data() + r * numel + o * run, static_cast<size_t>(run) * 4);
        out += run;
      }
    }
  }
  return full;
}

}  // namespace ndt
