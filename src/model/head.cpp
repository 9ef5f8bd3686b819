#include "model/head.h"

#include "kernels/kernels.h"
#include "model/norm.h"

#include <algorithm>
#include <vector>

namespace ndt {

Head::Head(const ModelConfig& config, const ParameterStore& store, Workspace& workspace)
    : c_(config), ws_(workspace), wte_(&store.get("wte.weight")), lnf_w_(&store.get("lnf.weight")) {
  if (c_.has_bias()) lnf_b_ = &store.get("lnf.bias");
  if (!c_.tied_embeddings) lm_head_ = &store.get("lm_head.weight");
}

void Head::bind(const TensorParallelRegions& tp) {
  tp_ = &tp;
  final_norm_partial_ = PartialGradients(tp, {lnf_w_, lnf_b_});
}

void Head::forward(MicroBatchContext& ctx) {
  ws_.fit(ctx);
  const int64_t Nl = tp_->local_rows(ctx.rows()), C = c_.d_model;
  HeadActivations& h = ctx.head;
  // The final norm on the local rows; the output layer's input is all rows.
  float* lnf_local = tp_->splits_rows() ? ws_.block.dln_local : h.lnf;
  norm_forward(c_, lnf_local, h.lnf_mean, h.lnf_rstd, ctx.stream.back(), *lnf_w_, lnf_b_, Nl);
  tp_->column_input_forward(lnf_local, h.lnf, Nl, C);
  if (ctx.forward_only && !ctx.targets.empty()) output_layer_and_loss(ctx, 0.0f);
}

void Head::output_layer_and_loss(MicroBatchContext& ctx, float grad_scale) {
  const int N = static_cast<int>(ctx.rows()), C = c_.d_model, chunk = ws_.loss_chunk_rows();
  const Parameter& w = weight();
  const int V_local = static_cast<int>(w.local_shape[0]);
  const bool backward = grad_scale != 0.0f;
  const float* lnf = ctx.head.lnf;
  float* losses = ctx.head.losses;
  const bool z = z_loss_ != 0.0f;
  if (z) z_losses_.resize(static_cast<size_t>(std::min(chunk, N)));
  double z_sum = 0;  // in row order, as the losses below: independent of the chunk size
  if (backward) kernels::zero(ws_.dlnf, int64_t{N} * C);
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    matmul_forward(ws_.matmul, ws_.logits, lnf + int64_t{r0} * C, w, nullptr, rows);
    vocab_parallel_cross_entropy(*tp_, ws_.logits, losses + r0, ctx.targets.data() + r0, rows, V_local,
                                 w.local_offset[0], grad_scale, ws_.loss_work, z_loss_, z ? z_losses_.data() : nullptr);
    if (z) {
      for (int i = 0; i < rows; ++i) z_sum += z_losses_[static_cast<size_t>(i)];
    }
    if (backward) {
      matmul_backward(ws_.matmul, ws_.dlnf + int64_t{r0} * C, /*weight_grad=*/true, nullptr, ws_.logits,
                      lnf + int64_t{r0} * C, w, rows);
    }
  }
  double sum = 0;
  for (int i = 0; i < N; ++i) sum += losses[i];
  ctx.loss_sum = sum;
  ctx.z_loss_sum = z_sum;
}

void Head::backward(MicroBatchContext& ctx, ModelHooks* hooks) {
  ws_.fit(ctx);
  const int64_t Nl = tp_->local_rows(ctx.rows()), C = c_.d_model;
  output_layer_and_loss(ctx, ctx.grad_scale);
  // dlnf holds this rank's part of the output layer's input gradient (its vocabulary).
  const float* dlnf = tp_->column_input_backward(ws_.dlnf, ws_.block.dln_local, Nl, C);
  kernels::zero(ws_.dstream, Nl * C);
  final_norm_partial_.begin();
  norm_backward(c_, ws_.dstream, final_norm_partial_.grad(lnf_w_), final_norm_partial_.grad(lnf_b_), *lnf_w_, dlnf,
                ctx.stream.back(), ctx.head.lnf_mean, ctx.head.lnf_rstd, Nl);
  final_norm_partial_.finish();
}

void Head::row_logits(const MicroBatchContext& ctx, int64_t row, float* logits) const {
  const int C = c_.d_model;
  const Parameter& w = weight();
  const int64_t V_local = w.local_shape[0];
  std::vector<float> local(static_cast<size_t>(V_local));
  matmul_forward(ws_.matmul, local.data(), ctx.head.lnf + row * C, w, nullptr, 1);
  tp_->all_gather(local.data(), logits, V_local);
}

}  // namespace ndt
