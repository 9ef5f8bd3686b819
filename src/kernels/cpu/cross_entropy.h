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

}  // namespace ndt::cpu
