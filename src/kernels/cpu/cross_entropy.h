// Softmax cross-entropy fused with its gradient, computed in place on the logits so
// the caller can stream the output layer over row chunks and never hold N x V twice.
#pragma once

#include <cstdint>

namespace ndt::cpu {

// For each row n < N: losses[n] = logsumexp(logits[n]) - logits[n, targets[n]].
// If grad_scale != 0, logits[n] is overwritten with grad_scale * (softmax(logits[n]) -
// onehot(targets[n])), the gradient of grad_scale * losses[n]; otherwise logits is left
// unchanged. targets must be in [0, V).
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                           float grad_scale);

// The same loss in three pieces over one vocabulary slice, logits [rows, V] holding the
// columns [vocab_begin, vocab_begin + V) of the whole vocabulary, so a vocab-parallel
// caller can all-reduce the small per-row arrays between the pieces:
//   cross_entropy_row_max      row_max[n] = max_j logits[n, j]          -> all-reduce max
//   cross_entropy_exp_sums     sums[n] = sum_j exp(logits[n, j] - row_max[n]),
//                              target_logit[n] = logits[n, targets[n] - vocab_begin] if
//                              this slice owns the target, else 0       -> all-reduce sum
//   cross_entropy_finish       losses[n] = row_max + log(sums) - target_logit, and the
//                              gradient of this slice
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
// (softmax - onehot(target)) for this slice; otherwise logits are not touched.
void cross_entropy_finish(float* logits, float* losses, const float* row_max, const float* sums,
                          const float* target_logit, const int32_t* targets, int64_t vocab_begin, int rows,
                          int V, float grad_scale);

}  // namespace ndt::cpu
