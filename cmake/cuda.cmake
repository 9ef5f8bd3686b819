# The CUDA backend (docs/gpu.md): kernels (src/kernels/cuda), the device allocator and
# the NCCL and host-staged communicators (src/comm/nccl_*, src/comm/host_staged_*), in an object library folded into ndtrain_lib.
#   NDT_CUDA=auto  on when nvcc is found (the default), else a CPU-only build
#   NDT_CUDA=on    required: no nvcc is a configure error
#   NDT_CUDA=off   CPU only: nothing here is compiled, linked or even looked for
# The .cu files are C++17: CMake 3.25 does not know nvcc 13's C++20 flag (the host .cpp stay C++20).
# One architecture (Hopper, sm_90; NDT_CUDA_ARCH overrides) keeps the compile short on CI.
set(NDT_CUDA "auto" CACHE STRING "Build the CUDA backend: auto (when nvcc is found), on, off")
set_property(CACHE NDT_CUDA PROPERTY STRINGS auto on off)
set(NDT_CUDA_ARCH "90" CACHE STRING "The one CUDA architecture compiled for (90: Hopper)")
set(NDT_HAS_CUDA OFF)

if(NOT NDT_CUDA MATCHES "^(auto|on|off)$")
  message(FATAL_ERROR "NDT_CUDA=${NDT_CUDA}: expected auto, on or off")
endif()
if(NOT NDT_CUDA STREQUAL "off")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(NDT_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(NDT_NVCC)
      set(CMAKE_CUDA_COMPILER ${NDT_NVCC})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    set(NDT_HAS_CUDA ON)
  elseif(NDT_CUDA STREQUAL "on")
    message(FATAL_ERROR "NDT_CUDA=on but no nvcc was found (looked in PATH, $CUDA_HOME/bin and "
                        "/usr/local/cuda/bin): install the CUDA toolkit, or set NDT_CUDA=auto or off")
  endif()
endif()
message(STATUS "NDT_CUDA=${NDT_CUDA}: CUDA backend ${NDT_HAS_CUDA}")
if(NOT NDT_HAS_CUDA)
  return()
endif()

set(CMAKE_CUDA_ARCHITECTURES ${NDT_CUDA_ARCH})
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # the cudart that CUDA::cudart links, never a second, static one
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
find_library(NDT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
if(NOT NDT_NCCL_LIBRARY)
  message(FATAL_ERROR "NDT_CUDA=${NDT_CUDA}: nvcc found but not NCCL (libnccl) beside it in ${CUDAToolkit_LIBRARY_DIR}")
endif()

file(GLOB NDT_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cu
     ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cpp ${PROJECT_SOURCE_DIR}/src/comm/nccl_*.cpp
     ${PROJECT_SOURCE_DIR}/src/comm/host_staged_*.cpp)
add_library(ndtrain_cuda OBJECT ${NDT_CUDA_SOURCES})
set_target_properties(ndtrain_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
target_include_directories(ndtrain_cuda PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(ndtrain_cuda PRIVATE OMPI_SKIP_MPICXX=1 NDT_HAS_CUDA=1)
target_compile_options(ndtrain_cuda PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Werror>"
                       "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings;-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>")
target_link_libraries(ndtrain_cuda PRIVATE CUDA::cudart CUDA::cublasLt MPI::MPI_C fmt::fmt)
# The backend links into test_cuda only, with its own build of the dispatch's state
# (src/kernels/cuda/dispatch_state.cpp: kernels.cpp with NDT_HAS_CUDA). ndtrain and the
# other tests keep the cpu-only dispatch: loading cublasLt and cudart costs every process
# about 210 MB of resident memory at start-up (measured: `ndtrain config` 224 MB linked,
# 14 MB not), which CPU runs must not pay; the model is not on the device yet either
# (docs/gpu.md). Loading the libraries when the cuda backend starts is the next step.
set(NDT_CUDA_LINK CUDA::cudart CUDA::cublasLt ${NDT_NCCL_LIBRARY})
