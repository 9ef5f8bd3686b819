// A LoRA adapter on a linear layer (model/lora_config.h): out += s (x A^T) B^T with
// s = alpha / r, A [r, in], B [out, r]. It works on the base layer's local blocks, so
// under tensor parallelism it needs no communication of its own:
//   column-parallel base (W [out / tp, in]): B split with W's rows, A replicated and
//     used inside the tensor-parallel region (its gradient a partial sum over tp);
//   row-parallel base (W [out, in / tp]): A split with W's columns, B replicated; the
//     adapter's output joins the row layer's partial output before the sum over tp,
//     B's gradient is a partial sum over tp.
// The partial sums go through the block's PartialGradients, reduced once per backward.
// The [rows, r] intermediate x A^T is recomputed in backward (r columns: cheap), so
// activation checkpointing and the activation ledger are unchanged.
#pragma once

#include "model/matmul.h"
#include "model/parameter.h"

#include <cstdint>
#include <string>

namespace ndt {

class PartialGradients;  // model/tp_layers.h

// Whether the parameter `name` is a LoRA factor (<base>.lora_a or <base>.lora_b).
bool is_lora_parameter(const std::string& name);

struct LoraAdapter {
  const Parameter* a = nullptr;  // [r, in] (its local block)
  const Parameter* b = nullptr;  // [out, r]
  float scale = 1.0f;            // alpha / r
  // Where backward writes the gradients (the replicated factor's partial sum over tp);
  // null: straight into the parameters' gradients.
  PartialGradients* partial = nullptr;

  // out [rows, out] += scale (inp [rows, in] A^T) B^T.
  void forward(const MatmulPrecision& mp, float* out, const float* inp, int64_t rows) const;
  // dinp [rows, in] += scale dout B A (dinp may be null); A's and B's gradients +=
  // (scale dout B)^T inp and dout^T scale (inp A^T).
  void backward(const MatmulPrecision& mp, float* dinp, const float* dout, const float* inp, int64_t rows) const;
};

}  // namespace ndt
