// The precision policy (config precision.compute; docs/precision.md says what runs in
// which dtype): parameters, gradients, AdamW moments, the loss and every reduction stay
// fp32; with a low compute dtype (bf16 or f16) the matmuls read their inputs and
// weights rounded to it (products exact, sums in fp32), and blocks keep the
// activations they save for backward in it (model/activations.h).
#pragma once

#include "core/dtype.h"
#include "model/fp8_scaling.h"

#include <string_view>

namespace ndt {

struct Precision {
  DType compute = DType::f32;  // f32, bf16 or f16
  // The blocks' linear layers in fp8 (model/fp8_linear.h); needs compute bf16.
  bool fp8 = false;
  Fp8ScalingConfig fp8_scaling;
  bool low() const { return compute != DType::f32; }
};

// precision.compute's names: "fp32", "bf16", "fp16".
std::string_view compute_dtype_config_name(DType dtype);
// Throws naming the setting (key) and the choices.
DType compute_dtype_from_config_name(std::string_view name, std::string_view key = "precision.compute");
// The dtype gradient reductions send (precision.reduce_dtype): fp32 or bf16. Throws naming
// the key, the value and those two; fp16 with why (gradient sums overflow its range).
DType reduce_dtype_from_config_name(std::string_view name, std::string_view key = "precision.reduce_dtype");

}  // namespace ndt
