// The dispatch seam (kernels/kernels.h): the active backend is cpu, an unknown backend
// is refused by name, every routed kernel gives the same bits as the cpu kernel it
// routes to; cuda is refused by name where no device starts; and Tensor's device
// (core/tensor.h): cpu, with copy_from checked, and a ledger per device.
#include "kernels/kernels.h"

#include "../common/gradcheck.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/threads.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ndt {
namespace {

using ndt::testing::random_vector;

TEST(Dispatch, BackendIsCpu) {
  EXPECT_EQ(kernels::backend(), kernels::Backend::cpu);
  EXPECT_STREQ(kernels::backend_name(kernels::backend()), "cpu");
  EXPECT_NO_THROW(kernels::set_backend(kernels::Backend::cpu));
  EXPECT_EQ(kernels::backend(), kernels::Backend::cpu);
}

TEST(Dispatch, UnknownBackendIsRefusedByName) {
  try {
    kernels::set_backend(static_cast<kernels::Backend>(7));
    FAIL() << "set_backend accepted an unknown backend";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("set_backend"), std::string::npos) << msg;
    EXPECT_NE(msg.find("7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  }
  EXPECT_EQ(kernels::backend(), kernels::Backend::cpu) << "a refused backend must not become active";
}

// Without a usable GPU (here: always; NDT_CUDA=off builds, or no device), choosing cuda
// is an error naming it, cpu stays active, and no tensor can be put on the device.
TEST(Dispatch, CudaBackendWithoutADeviceIsRefusedByName) {
  try {
    kernels::set_backend(kernels::Backend::cuda);
    kernels::set_backend(kernels::Backend::cpu);
    GTEST_SKIP() << "a CUDA device started: tests/cuda covers the backend";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
  }
  EXPECT_EQ(kernels::backend(), kernels::Backend::cpu) << "a refused backend must not become active";
  EXPECT_STREQ(kernels::backend_name(kernels::Backend::cuda), "cuda");
  try {
    (void)Tensor::empty({4}, DType::f32, MemTag::other, Device::cuda);
    FAIL() << "a cuda tensor was allocated without a started device";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no cuda device memory"), std::string::npos) << msg;
  }
  EXPECT_EQ(MemoryLedger::for_device(Device::cuda).current_total(), 0u);
}

TEST(Dispatch, ThreadsRouteToCpu) {
  const int saved = cpu::num_threads();
  kernels::set_num_threads(1);
  EXPECT_EQ(cpu::num_threads(), 1);
  EXPECT_EQ(kernels::num_threads(), 1);
  kernels::set_num_threads(saved);
  EXPECT_EQ(kernels::num_threads(), saved);
}

// Runs `through_kernels` and `through_cpu` on copies of the same buffers and expects
// the same bits in every buffer afterwards.
void expect_same(const char* what, std::vector<std::vector<float>> buffers,
                 const std::function<void(std::vector<std::vector<float>>&)>& through_kernels,
                 const std::function<void(std::vector<std::vector<float>>&)>& through_cpu) {
  std::vector<std::vector<float>> a = buffers, b = std::move(buffers);
  through_kernels(a);
  through_cpu(b);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0) << what << " buffer " << i;
  }
}

using Bufs = std::vector<std::vector<float>>;

TEST(Dispatch, KernelsRouteToCpuBitwise) {
  const int N = 6, IC = 10, OC = 7;
  auto r = [](int64_t n, uint64_t stream) { return random_vector(n, stream); };
  // gemm / linear
  expect_same("gemm", {r(N * IC, 1), r(OC * IC, 2), r(N * OC, 3)},
              [&](Bufs& x) { kernels::gemm(false, true, N, OC, IC, 0.5f, x[0].data(), IC, x[1].data(), IC, 1.0f, x[2].data(), OC); },
              [&](Bufs& x) { cpu::gemm(false, true, N, OC, IC, 0.5f, x[0].data(), IC, x[1].data(), IC, 1.0f, x[2].data(), OC); });
  expect_same("linear_forward", {r(N * OC, 4), r(N * IC, 5), r(OC * IC, 6), r(OC, 7)},
              [&](Bufs& x) { kernels::linear_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), N, IC, OC); },
              [&](Bufs& x) { cpu::linear_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), N, IC, OC); });
  expect_same("linear_backward", {r(N * IC, 8), r(OC * IC, 9), r(OC, 10), r(N * OC, 11), r(N * IC, 12), r(OC * IC, 13)},
              [&](Bufs& x) { kernels::linear_backward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), N, IC, OC); },
              [&](Bufs& x) { cpu::linear_backward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), N, IC, OC); });
  expect_same("add_bias / bias_backward", {r(N * OC, 14), r(OC, 15), r(OC, 16)},
              [&](Bufs& x) { kernels::add_bias(x[0].data(), x[1].data(), N, OC); kernels::bias_backward(x[2].data(), x[0].data(), N, OC); },
              [&](Bufs& x) { cpu::add_bias(x[0].data(), x[1].data(), N, OC); cpu::bias_backward(x[2].data(), x[0].data(), N, OC); });
  // elementwise
  expect_same("add_inplace / copy / fill / zero", {r(100, 17), r(100, 18), r(100, 19), r(100, 20)},
              [&](Bufs& x) { kernels::add_inplace(x[0].data(), x[1].data(), 100); kernels::copy(x[1].data(), x[0].data(), 100);
                             kernels::fill(x[2].data(), 3.0f, 99); kernels::zero(x[3].data(), 98); },
              [&](Bufs& x) { cpu::add_inplace(x[0].data(), x[1].data(), 100); cpu::copy(x[1].data(), x[0].data(), 100);
                             cpu::fill(x[2].data(), 3.0f, 99); cpu::zero(x[3].data(), 98); });
  // norms
  const int C = IC;
  expect_same("layernorm", {r(N * C, 21), r(N, 22), r(N, 23), r(N * C, 24), r(C, 25), r(C, 26), r(N * C, 27), r(C, 28), r(C, 29), r(N * C, 30)},
              [&](Bufs& x) { kernels::layernorm_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), N, C, 1e-5f);
                             kernels::layernorm_backward(x[6].data(), x[7].data(), x[8].data(), x[9].data(), x[3].data(), x[4].data(), x[1].data(), x[2].data(), N, C); },
              [&](Bufs& x) { cpu::layernorm_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), N, C, 1e-5f);
                             cpu::layernorm_backward(x[6].data(), x[7].data(), x[8].data(), x[9].data(), x[3].data(), x[4].data(), x[1].data(), x[2].data(), N, C); });
  expect_same("rmsnorm", {r(N * C, 31), r(N, 32), r(N * C, 33), r(C, 34), r(N * C, 35), r(C, 36), r(N * C, 37)},
              [&](Bufs& x) { kernels::rmsnorm_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), N, C, 1e-6f);
                             kernels::rmsnorm_backward(x[4].data(), x[5].data(), x[6].data(), x[2].data(), x[3].data(), x[1].data(), N, C); },
              [&](Bufs& x) { cpu::rmsnorm_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), N, C, 1e-6f);
                             cpu::rmsnorm_backward(x[4].data(), x[5].data(), x[6].data(), x[2].data(), x[3].data(), x[1].data(), N, C); });
  // attention and rope: B 1, T 4, NH 2, NKV 1, HS 8
  const int B = 1, T = 4, NH = 2, NKV = 1, HS = 8, QN = B * T * NH * HS, KN = B * T * NKV * HS;
  expect_same("attention", {r(QN, 40), r(B * NH * T, 41), r(B * NH * T * T, 42), r(QN, 43), r(KN, 44), r(KN, 45),
                            r(QN, 46), r(KN, 47), r(KN, 48), r(QN, 49)},
              [&](Bufs& x) { kernels::attention_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), nullptr, B, T, NH, NKV, HS);
                             kernels::attention_backward(x[6].data(), x[7].data(), x[8].data(), x[9].data(), x[3].data(), x[4].data(), x[5].data(), x[2].data(), nullptr, B, T, NH, NKV, HS); },
              [&](Bufs& x) { cpu::attention_forward(x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), x[5].data(), nullptr, B, T, NH, NKV, HS);
                             cpu::attention_backward(x[6].data(), x[7].data(), x[8].data(), x[9].data(), x[3].data(), x[4].data(), x[5].data(), x[2].data(), nullptr, B, T, NH, NKV, HS); });
  expect_same("rope", {r(QN, 50), r(QN, 51), r(QN, 52), r(QN, 53)},
              [&](Bufs& x) { kernels::rope_forward(x[0].data(), x[1].data(), B, T, NH, HS, 3, 10000.0f);
                             kernels::rope_backward(x[2].data(), x[3].data(), B, T, NH, HS, 3, 10000.0f); },
              [&](Bufs& x) { cpu::rope_forward(x[0].data(), x[1].data(), B, T, NH, HS, 3, 10000.0f);
                             cpu::rope_backward(x[2].data(), x[3].data(), B, T, NH, HS, 3, 10000.0f); });
  // activations
  expect_same("gelu / swiglu", {r(50, 60), r(50, 61), r(50, 62), r(50, 63), r(50, 64), r(50, 65), r(50, 66), r(50, 67)},
              [&](Bufs& x) { kernels::gelu_forward(x[0].data(), x[1].data(), 50); kernels::gelu_backward(x[2].data(), x[1].data(), x[3].data(), 50);
                             kernels::swiglu_forward(x[4].data(), x[5].data(), x[6].data(), 50);
                             kernels::swiglu_backward(x[7].data(), x[0].data(), x[3].data(), x[5].data(), x[6].data(), 50); },
              [&](Bufs& x) { cpu::gelu_forward(x[0].data(), x[1].data(), 50); cpu::gelu_backward(x[2].data(), x[1].data(), x[3].data(), 50);
                             cpu::swiglu_forward(x[4].data(), x[5].data(), x[6].data(), 50);
                             cpu::swiglu_backward(x[7].data(), x[0].data(), x[3].data(), x[5].data(), x[6].data(), 50); });
  // embedding
  const int V = 9;
  const std::vector<int32_t> ids = {3, 0, 8, 3, 5, 1};
  expect_same("embedding", {r(N * C, 70), r(V * C, 71), r(V * C, 72), r(N * C, 73), r(N * C, 74), r(4 * C, 75)},
              [&](Bufs& x) { kernels::embedding_forward(x[0].data(), ids.data(), x[1].data(), N, C, true);
                             kernels::embedding_backward(x[2].data(), x[3].data(), ids.data(), N, C);
                             kernels::embedding_forward_range(x[4].data(), ids.data(), x[1].data() + 2 * C, 2, 4, N, C);
                             kernels::embedding_backward_range(x[5].data(), x[3].data(), ids.data(), 2, 4, N, C); },
              [&](Bufs& x) { cpu::embedding_forward(x[0].data(), ids.data(), x[1].data(), N, C, true);
                             cpu::embedding_backward(x[2].data(), x[3].data(), ids.data(), N, C);
                             cpu::embedding_forward_range(x[4].data(), ids.data(), x[1].data() + 2 * C, 2, 4, N, C);
                             cpu::embedding_backward_range(x[5].data(), x[3].data(), ids.data(), 2, 4, N, C); });
  // loss: fused and pieces
  const std::vector<int32_t> targets = {1, 8, 0, 4, 4, 2};
  expect_same("cross entropy", {r(N * V, 80), r(N, 81), r(N * V, 82), r(N, 83), r(N, 84), r(N, 85), r(N, 86)},
              [&](Bufs& x) { kernels::softmax_cross_entropy(x[0].data(), x[1].data(), targets.data(), N, V, 0.5f, 0.0f, nullptr);
                             kernels::cross_entropy_row_max(x[2].data(), x[3].data(), N, V);
                             kernels::cross_entropy_exp_sums(x[2].data(), x[3].data(), targets.data(), 0, x[4].data(), x[5].data(), N, V, true);
                             kernels::cross_entropy_finish(x[2].data(), x[6].data(), x[3].data(), x[4].data(), x[5].data(), targets.data(), 0, N, V, 0.5f, 0.0f, nullptr); },
              [&](Bufs& x) { cpu::softmax_cross_entropy(x[0].data(), x[1].data(), targets.data(), N, V, 0.5f);
                             cpu::cross_entropy_row_max(x[2].data(), x[3].data(), N, V);
                             cpu::cross_entropy_exp_sums(x[2].data(), x[3].data(), targets.data(), 0, x[4].data(), x[5].data(), N, V, true);
                             cpu::cross_entropy_finish(x[2].data(), x[6].data(), x[3].data(), x[4].data(), x[5].data(), targets.data(), 0, N, V, 0.5f); });
  // optimiser
  std::vector<float> m0(40, 0.0f);
  expect_same("adamw_update", {r(40, 90), r(40, 91), m0, m0},
              [&](Bufs& x) { kernels::adamw_update(x[0].data(), x[1].data(), x[2].data(), x[3].data(), 40, kernels::AdamWStep{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1}); },
              [&](Bufs& x) { cpu::adamw_update(x[0].data(), x[1].data(), x[2].data(), x[3].data(), 40, cpu::AdamWStep{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1}); });
}

// ---- Tensor's device (core) ------------------------------------------------------

// Each device has its own ledger: bytes on one never show on another.
TEST(TensorDevice, LedgerPerDevice) {
  MemoryLedger& host = MemoryLedger::instance();
  MemoryLedger& gpu = MemoryLedger::for_device(Device::cuda);
  EXPECT_EQ(&host, &MemoryLedger::for_device(Device::cpu));
  EXPECT_NE(&host, &gpu);
  const size_t host_before = host.current(MemTag::params), gpu_before = gpu.current(MemTag::params);
  gpu.on_alloc(MemTag::params, 1000);
  EXPECT_EQ(gpu.current(MemTag::params), gpu_before + 1000);
  EXPECT_EQ(host.current(MemTag::params), host_before);
  gpu.on_free(MemTag::params, 1000);
  EXPECT_EQ(gpu.current(MemTag::params), gpu_before);
  {
    Tensor t = Tensor::empty({250}, DType::f32, MemTag::params);
    EXPECT_EQ(host.current(MemTag::params), host_before + 1000);
    EXPECT_EQ(gpu.current(MemTag::params), gpu_before);
  }
  EXPECT_STREQ(device_name(Device::cuda), "cuda");
}

TEST(TensorDevice, CpuEverywhere) {
  Tensor t = Tensor::zeros({2, 3}, DType::f32, MemTag::other);
  EXPECT_EQ(t.device(), Device::cpu);
  EXPECT_EQ(t.slice(1, 2).device(), Device::cpu);
  EXPECT_EQ(t.view({3, 2}).device(), Device::cpu);
  EXPECT_EQ(Tensor().device(), Device::cpu);
  EXPECT_STREQ(device_name(Device::cpu), "cpu");
}

TEST(TensorDevice, CopyFromCopiesAndChecks) {
  Tensor a = Tensor::empty({3, 4}, DType::f32, MemTag::other);
  for (int i = 0; i < 12; ++i) a.data<float>()[i] = static_cast<float>(i) - 5.5f;
  Tensor b = Tensor::zeros({3, 4}, DType::f32, MemTag::other);
  b.copy_from(a);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  // Into a row slice of a bigger tensor: only those rows change.
  Tensor big = Tensor::zeros({5, 4}, DType::f32, MemTag::other);
  big.slice(1, 4).copy_from(a);
  EXPECT_EQ(big.data<float>()[3], 0.0f);
  EXPECT_EQ(big.data<float>()[4], a.data<float>()[0]);
  EXPECT_EQ(big.data<float>()[15], a.data<float>()[11]);
  EXPECT_EQ(big.data<float>()[16], 0.0f);

  auto expect_error = [](const std::function<void()>& f, std::vector<std::string> parts) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
    }
  };
  Tensor fewer = Tensor::zeros({2, 4}, DType::f32, MemTag::other);
  expect_error([&] { fewer.copy_from(a); }, {"Tensor::copy_from", "[3, 4]", "[2, 4]", "12 elements", "8 elements"});
  Tensor ints = Tensor::zeros({3, 4}, DType::i32, MemTag::other);
  expect_error([&] { ints.copy_from(a); }, {"Tensor::copy_from", "f32", "i32"});
  expect_error([&] { b.copy_from(Tensor()); }, {"Tensor::copy_from", "source", "undefined"});
}

}  // namespace
}  // namespace ndt

namespace ndt {
namespace {

// Catches a BLAS core recommended for a CPU that cannot run it (an illegal instruction
// in the first GEMM) or one that is not better than OpenBLAS's own choice (a restart loop).
TEST(BlasCore, RecommendsOnlyAStrongerCoreTheCpuRuns) {
  const std::optional<std::string> recommended = cpu::recommended_blas_core();
  EXPECT_FALSE(cpu::blas_core_name().empty());
  if (!recommended) return;
  EXPECT_NE(*recommended, cpu::blas_core_name());
  __builtin_cpu_init();
  if (*recommended == "SkylakeX") {
    EXPECT_TRUE(__builtin_cpu_supports("avx512f"));
  } else {
    EXPECT_EQ(*recommended, "Haswell");
    EXPECT_TRUE(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  }
}

// OpenBLAS 0.3.21 runs its AVX2 Haswell kernels on an AVX-512 AMD EPYC of family 26, and
// Prescott's on a Xeon it does not know: each is replaced by the widest core the CPU runs,
// never by a narrower one, and a core this table does not know is left as chosen.
TEST(BlasCore, ANarrowerCoreIsReplacedByTheCpusWidest) {
  using cpu::VectorWidth;
  EXPECT_EQ(cpu::wider_blas_core("Haswell", VectorWidth::avx512), "SkylakeX");
  EXPECT_EQ(cpu::wider_blas_core("Zen", VectorWidth::avx512), "SkylakeX");
  EXPECT_EQ(cpu::wider_blas_core("Prescott", VectorWidth::avx512), "SkylakeX");
  EXPECT_EQ(cpu::wider_blas_core("Prescott", VectorWidth::avx2), "Haswell");
  EXPECT_EQ(cpu::wider_blas_core("Sandybridge", VectorWidth::avx2), "Haswell");
  EXPECT_EQ(cpu::wider_blas_core("Haswell", VectorWidth::avx2), std::nullopt);
  EXPECT_EQ(cpu::wider_blas_core("SkylakeX", VectorWidth::avx512), std::nullopt);
  EXPECT_EQ(cpu::wider_blas_core("Cooperlake", VectorWidth::avx512), std::nullopt);
  EXPECT_EQ(cpu::wider_blas_core("SkylakeX", VectorWidth::avx2), std::nullopt);
  EXPECT_EQ(cpu::wider_blas_core("Prescott", VectorWidth::narrow), std::nullopt);
  EXPECT_EQ(cpu::wider_blas_core("SomeNewerCore", VectorWidth::avx512), std::nullopt);
}

// A VM image's OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU made fp32 steps 1.75x slower with
// nothing in the run header to say why: the header names the setting and the wider core.
TEST(BlasCore, TheRunHeaderSaysWhenTheUsersCoreIsNarrowerThanTheCpu) {
  using cpu::VectorWidth;
  EXPECT_EQ(cpu::describe_blas_core("Cooperlake", VectorWidth::avx512, nullptr, nullptr), "OpenBLAS Cooperlake kernels");
  EXPECT_EQ(cpu::describe_blas_core("SkylakeX", VectorWidth::avx512, "SkylakeX", "Prescott"),
            "OpenBLAS SkylakeX kernels (OpenBLAS chose Prescott for this CPU; ndtrain set OPENBLAS_CORETYPE)");
  EXPECT_EQ(cpu::describe_blas_core("Haswell", VectorWidth::avx2, "Haswell", nullptr), "OpenBLAS Haswell kernels");
  const std::string narrower = cpu::describe_blas_core("Haswell", VectorWidth::avx512, "Haswell", nullptr);
  for (const char* part : {"OpenBLAS Haswell kernels", "OPENBLAS_CORETYPE=Haswell", "SkylakeX", "unset OPENBLAS_CORETYPE"}) {
    EXPECT_NE(narrower.find(part), std::string::npos) << narrower;
  }
}

}  // namespace
}  // namespace ndt
