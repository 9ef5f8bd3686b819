// The target id that counts in no loss: a loss-masked token (data.loss_mask, docs/data.md).
// Its loss, z-loss and gradient are 0; the loss is normalised by the number of the other
// targets. Every layout splits targets with the tokens, so the mask needs no code of its own
// in tensor, context or pipeline parallelism.
#pragma once

#include <cstdint>

namespace ndt {

inline constexpr int32_t kIgnoredTarget = -1;

}  // namespace ndt
