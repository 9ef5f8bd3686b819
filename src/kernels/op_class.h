// Op classes: what `ndtrain bench train --profile` sums a step's kernel time into
// (kernels/profile.h). Every routed kernel of kernels.h belongs to one class, named by
// op_class_of below: a kernel added to NDT_KERNEL_LIST needs a row here too, or kernels.h
// does not compile (a static_assert names the kernel). GEMMs are split by
// the dtype they multiply; fp8 GEMMs run on the bf16 GEMM with fp8-grid operands, so the
// model marks them (ProfileScope in model/matmul.cpp) and their quantisation with them.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace ndt::kernels {

enum class OpClass {
  gemm_f32,       // fp32 GEMMs and linear layers (OpenBLAS)
  gemm_16bit,     // bf16 / f16 GEMMs and linear layers (oneDNN, or the fp32 fallback)
  gemm_fp8,       // fp8 linears: quantisation to the fp8 grids and their bf16 GEMMs
  attention,      // attention and ring attention's span kernels
  cross_entropy,  // softmax cross-entropy, fused or in pieces
  norm,           // layernorm, rmsnorm
  elementwise,    // activations, residual adds, bias, rope, embedding, copies, zeroing gradients
  cast,           // fp32 <-> bf16 / f16 conversions
  optimizer,      // AdamW, and the gradient norm's sum of squares (optim/clip.cpp)
  moe_routing,    // an MoE block's top-k choice, its router's gradient and its rows' moves (model/moe.cpp)
  untimed,        // bookkeeping calls (thread count, backend names): not timed
};
inline constexpr size_t kNumOpClasses = 11;

// "gemm fp32", "gemm bf16/f16", "gemm fp8", "attention", ...
std::string_view op_class_name(OpClass op_class);
// The class as a metrics key (train.profile): "gemm_fp32", "gemm_16bit", "gemm_fp8",
// "attention", "cross_entropy", "norm", "elementwise", "cast", "optimizer", "moe_routing".
std::string_view op_class_key(OpClass op_class);

// The class of a kernel of NDT_KERNEL_LIST by its name; nullopt for a name no row covers.
constexpr std::optional<OpClass> op_class_of(std::string_view kernel) {
  struct Row {
    std::string_view prefix;
    OpClass op_class;
  };
  // First matching prefix wins.
  constexpr std::array<Row, 29> rows{{
      {"gemm_lowp", OpClass::gemm_16bit},       {"linear_forward_lowp", OpClass::gemm_16bit},
      {"linear_backward_lowp", OpClass::gemm_16bit}, {"gemm", OpClass::gemm_f32},
      {"linear_", OpClass::gemm_f32},           {"attention_", OpClass::attention},
      {"softmax_cross_entropy", OpClass::cross_entropy}, {"cross_entropy_", OpClass::cross_entropy},
      {"layernorm_", OpClass::norm},            {"rmsnorm_", OpClass::norm},
      {"gelu_", OpClass::elementwise},          {"swiglu_", OpClass::elementwise},
      {"rope_", OpClass::elementwise},          {"embedding_", OpClass::elementwise},
      {"add_", OpClass::elementwise},           {"bias_backward", OpClass::elementwise},
      {"zero", OpClass::elementwise},           {"copy", OpClass::elementwise},
      {"fill", OpClass::elementwise},           {"cast_", OpClass::cast},
      {"round_to_lowp", OpClass::cast},         {"split_columns_round", OpClass::cast},
      {"gather_columns_lowp", OpClass::cast},   {"gather_columns", OpClass::elementwise},
      {"adamw_", OpClass::optimizer},           {"moe_", OpClass::moe_routing},
      {"set_num_threads", OpClass::untimed},    {"num_threads", OpClass::untimed},
      {"lowp_gemm_backend", OpClass::untimed},
  }};
  for (const Row& row : rows) {
    if (kernel.substr(0, row.prefix.size()) == row.prefix) return row.op_class;
  }
  return std::nullopt;
}

}  // namespace ndt::kernels
