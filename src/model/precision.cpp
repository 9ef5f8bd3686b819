#include "model/precision.h"

#include "core/error.h"

namespace ndt {

std::string_view compute_dtype_config_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: return dtype_name(dtype);
  }
}

DType compute_dtype_from_config_name(std::string_view name, std::string_view key) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    if (name == compute_dtype_config_name(dtype)) return dtype;
  }
  fail("{} = \"{}\" is not a compute dtype: fp32, bf16 or fp16", key, name);
}

DType reduce_dtype_from_config_name(std::string_view name, std::string_view key) {
  NDT_CHECK(name != "fp16", "{} = \"fp16\": gradient sums can overflow fp16's range (65504); use bf16 or fp32", key);
  for (DType dtype : {DType::f32, DType::bf16}) {
    if (name == compute_dtype_config_name(dtype)) return dtype;
  }
  fail("{} = \"{}\" is not a gradient reduction dtype: fp32 or bf16", key, name);
}

}  // namespace ndt
