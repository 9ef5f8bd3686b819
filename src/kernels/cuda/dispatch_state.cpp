// The dispatch's state for builds that link the cuda backend (test_cuda): kernels.cpp
// compiled with NDT_HAS_CUDA, which this object library defines, so set_backend can start
// the device and the cuda twins come from twins.cpp. ndtrain_lib compiles kernels.cpp
// without it (cmake/cuda.cmake says why).
#include "../kernels.cpp"
