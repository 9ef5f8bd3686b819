#include "kernels/op_class.h"

namespace ndt::kernels {

std::string_view op_class_name(OpClass op_class) {
  switch (op_class) {
    case OpClass::gemm_f32: return "gemm fp32";
    case OpClass::gemm_16bit: return "gemm bf16/f16";
    case OpClass::gemm_fp8: return "gemm fp8";
    case OpClass::attention: return "attention";
    case OpClass::cross_entropy: return "cross-entropy";
    case OpClass::norm: return "norms";
    case OpClass::elementwise: return "elementwise";
    case OpClass::cast: return "casts";
    case OpClass::optimizer: return "optimizer";
    case OpClass::moe_routing: return "moe routing";
    case OpClass::untimed: return "untimed";
  }
  return "unknown";
}

std::string_view op_class_key(OpClass op_class) {
  switch (op_class) {
    case OpClass::gemm_f32: return "gemm_fp32";
    case OpClass::gemm_16bit: return "gemm_16bit";
    case OpClass::gemm_fp8: return "gemm_fp8";
    case OpClass::attention: return "attention";
    case OpClass::cross_entropy: return "cross_entropy";
    case OpClass::norm: return "norm";
    case OpClass::elementwise: return "elementwise";
    case OpClass::cast: return "cast";
    case OpClass::optimizer: return "optimizer";
    case OpClass::moe_routing: return "moe_routing";
    case OpClass::untimed: return "untimed";
  }
  return "unknown";
}

}  // namespace ndt::kernels
