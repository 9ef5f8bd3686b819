// The cuda backend's side of the dispatch (kernels/kernels.h): each kernel of the list
// with its CUDA twin (kernels/cuda/cuda_kernels.h). A pairing checks that both have the
// same type, so the twins cannot drift apart; a kernel of the list missing here refuses
// on the cuda backend, by name (docs/gpu.md lists them).
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

#include <cstddef>
#include <type_traits>

namespace ndt::kernels::detail {

template <auto Cpu>
struct CudaImpl {
  static constexpr std::nullptr_t fn = nullptr;
};

#define NDT_CUDA_TWIN(name, impl)                                                                            \
  static_assert(std::is_same_v<decltype(&cpu::name), decltype(&impl)>,                                       \
                "kernels/cuda: " #name " must have its cpu twin's signature");                               \
  template <>                                                                                                \
  struct CudaImpl<&cpu::name> {                                                                              \
    static constexpr auto fn = &impl;                                                                        \
  };
#define NDT_CUDA_KERNEL(name) NDT_CUDA_TWIN(name, cuda::name)

// Host threads stay the host's business on either backend.
NDT_CUDA_TWIN(set_num_threads, cpu::set_num_threads)
NDT_CUDA_TWIN(num_threads, cpu::num_threads)
NDT_CUDA_KERNEL(gemm)
NDT_CUDA_KERNEL(linear_forward)
NDT_CUDA_KERNEL(linear_backward)
NDT_CUDA_KERNEL(gemm_lowp)
NDT_CUDA_KERNEL(linear_forward_lowp)
NDT_CUDA_KERNEL(linear_backward_lowp)
NDT_CUDA_KERNEL(lowp_gemm_backend)
NDT_CUDA_KERNEL(add_inplace)
NDT_CUDA_KERNEL(zero)
NDT_CUDA_KERNEL(copy)
NDT_CUDA_KERNEL(fill)
NDT_CUDA_KERNEL(add_bias)
NDT_CUDA_KERNEL(bias_backward)
NDT_CUDA_KERNEL(cast_to_lowp)
NDT_CUDA_KERNEL(cast_rows_to_lowp)
NDT_CUDA_KERNEL(cast_from_lowp)
NDT_CUDA_KERNEL(round_to_lowp)
NDT_CUDA_KERNEL(layernorm_forward)
NDT_CUDA_KERNEL(layernorm_backward)
NDT_CUDA_KERNEL(rmsnorm_forward)
NDT_CUDA_KERNEL(rmsnorm_backward)
NDT_CUDA_KERNEL(attention_forward)
NDT_CUDA_KERNEL(attention_backward)
NDT_CUDA_KERNEL(rope_forward)
NDT_CUDA_KERNEL(rope_backward)
NDT_CUDA_KERNEL(rope_forward_at)
NDT_CUDA_KERNEL(rope_backward_at)
NDT_CUDA_KERNEL(gelu_forward)
NDT_CUDA_KERNEL(gelu_backward)
NDT_CUDA_KERNEL(swiglu_forward)
NDT_CUDA_KERNEL(swiglu_backward)
NDT_CUDA_KERNEL(embedding_forward)
NDT_CUDA_KERNEL(embedding_backward)
NDT_CUDA_KERNEL(embedding_forward_range)
NDT_CUDA_KERNEL(embedding_backward_range)
NDT_CUDA_KERNEL(softmax_cross_entropy)
NDT_CUDA_KERNEL(cross_entropy_row_max)
NDT_CUDA_KERNEL(cross_entropy_exp_sums)
NDT_CUDA_KERNEL(cross_entropy_finish)
NDT_CUDA_KERNEL(adamw_update)

#undef NDT_CUDA_KERNEL
#undef NDT_CUDA_TWIN

template <typename R, typename... Args, R (*Cpu)(Args...)>
R CudaTwin<Cpu>::call(const char* name, Args... args) {
  if constexpr (std::is_null_pointer_v<std::remove_cv_t<decltype(CudaImpl<Cpu>::fn)>>) {
    no_cuda_twin(name);
  } else {
    return CudaImpl<Cpu>::fn(args...);
  }
}

#define NDT_INSTANTIATE_TWIN(name) template struct CudaTwin<&cpu::name>;
NDT_KERNEL_LIST(NDT_INSTANTIATE_TWIN)
#undef NDT_INSTANTIATE_TWIN

}  // namespace ndt::kernels::detail
