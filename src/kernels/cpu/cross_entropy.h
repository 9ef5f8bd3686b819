// Softmax cross-entropy fused with its gradient, computed in place on the logits so
// the caller can stream the output layer over row chunks and never hold N x V twice.
#pragma once

#include <cstdint>

namespace ndt::cpu {

// For each row n < N: losses[n] = lse - logits[n, targets[n]] with lse =
// logsumexp(logits[n]), and the z-loss (PaLM) z_losses[n] = z_loss * lse^2 (written when
// z_losses is not null; it may be null, typically when z_loss is 0). If grad_scale != 0,
// logits[n] is overwritten with grad_scale * (softmax(logits[n]) * (1 + 2 z_loss lse) -
// onehot(targets[n])), the gradient of grad_scale * (losses[n] + z_losses[n]); otherwise
// logits is left unchanged. targets must be in [0, V) or kIgnoredTarget (core/targets.h: a
// loss-masked token), whose row gets loss 0, z-loss 0 and, with grad_scale != 0, a zero
// gradient; z_loss is the caller's to validate (finite, >= 0). With z_loss = 0 the losses
// and gradient are bitwise those without it.
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                           float grad_scale, float z_loss = 0.0f, float* z_losses = nullptr);

// The same loss in three pieces over one vocabulary slice, logits [rows, V] holding the
// columns [vocab_begin, vocab_begin + V) of the whole vocabulary, so a vocab-parallel
// caller can all-reduce the small per-row arrays between the pieces:
//   cross_entropy_row_max      row_max[n] = max_j logits[n, j]          -> all-reduce max
//   cross_entropy_exp_sums     sums[n] = sum_j exp(logits[n, j] - row_max[n]),
//                              target_logit[n] = logits[n, targets[n] - vocab_begin] if
//                              this slice owns the target, else 0       -> all-reduce sum
//   cross_entropy_finish       losses[n] = lse - target_logit with lse = row_max +
//                              log(sums), z_losses[n] = z_loss * lse^2, and the gradient
//                              of this slice (the z-loss needs no communication of its own)
// With one slice (vocab_begin 0, the whole vocabulary) and no reduction, the result
// equals softmax_cross_entropy up to rounding (the sums pass through float here).
// Targets are not validated (only the caller knows the whole vocabulary size): a target
// no slice owns gives target_logit 0. Each row is done by one thread in a fixed order,
// so results do not depend on the thread count.
void cross_entropy_row_max(const float* logits, float* row_max, int rows, int V);
// keep_exp: overwrite logits with exp(logit - row_max), which cross_entropy_finish turns
// into the gradient; otherwise logits are left unchanged.
void cross_entropy_exp_sums(float* logits, const float* row_max, const int32_t* targets, int64_t vocab_begin,
                            float* sums, float* target_logit, int rows, int V, bool keep_exp);
// row_max, sums and target_logit: the reduced (whole-vocabulary) values. If grad_scale
// != 0, logits must hold the exps (keep_exp) and are overwritten with grad_scale *
// (softmax * (1 + 2 z_loss lse) - onehot(target)) for this slice; otherwise logits are
// not touched. z_losses (may be null) and kIgnoredTarget rows as in softmax_cross_entropy.
void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows,
                          int V, float grad_scale, float z_loss = 0.0f, float* z_losses = nullptr);

}  // namespace ndt::cpu
