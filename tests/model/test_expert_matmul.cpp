// The routed experts' low-precision GEMMs (model/expert_matmul.h) on row counts below,
// at and above the row quantum they cut each expert's rows into (whole multiples in
// place, the rest padded with zero rows): every output, input gradient and weight
// gradient against a double sum of the rounded operands' products, on each bf16 GEMM
// backend this CPU has.
#include "core/memory.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm_lowp.h"
#include "model/expert_matmul.h"
#include "lowp_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::bf16;
using testing::wave;

// A routed weight [E, OC, IC] with its bf16 compute copy and a zeroed gradient.
struct ExpertWeightFixture {
  ExpertWeightFixture(int E, int OC, int IC) {
    const int64_t n = int64_t{E} * OC * IC;
    p.spec.name = "experts.w";
    p.spec.expert = true;
    p.local_shape = {E, OC, IC};
    p.value = Tensor::empty({n}, DType::f32, MemTag::params);
    p.grad = Tensor::zeros({n}, DType::f32, MemTag::grads);
    p.compute = Tensor::empty({n}, DType::bf16, MemTag::params);
    const std::vector<float> w = wave(n, 0.5f, 0.37f, 0.1f);
    std::copy(w.begin(), w.end(), p.data());
    cpu::cast_to_lowp(DType::bf16, p.data(), static_cast<uint16_t*>(p.compute.raw()), n);
  }
  Parameter p;
};

// The error bound of an fp32 sum of n exact products (bf16 x bf16 is exact in fp32),
// in any order: n units of 2^-24 of the sum of magnitudes.
double bound(int n, double magnitude) { return n * std::ldexp(magnitude, -24) + 1e-30; }

// Catches: the whole part or the padded rest at the wrong rows or the wrong expert's
// slice, padding rows that are not zero (they would add to the weight gradient), the
// rest's input gradient written over instead of added.
TEST(ExpertMatmul, Bf16OnAnyRowCountMatchesTheRoundedProducts) {
  const int IC = 24, OC = 40;
  const std::vector<int64_t> counts = {0, 64, 70, 5, 130, 1};  // around the 64-row quantum
  int64_t rows = 0;
  for (int64_t c : counts) rows += c;
  for (cpu::LowpGemmBackend backend : testing::lowp_backends(DType::bf16)) {
    cpu::set_lowp_gemm_backend(DType::bf16, backend);
    const int E = static_cast<int>(counts.size());
    ExpertWeightFixture w(E, OC, IC);
    ExpertRoute route;
    route.local_experts = E;
    route.send_counts = counts;
    route.recv_counts = counts;
    const std::vector<float> x = wave(rows * IC, 1.5f, 0.37f, 0.3f), dout = wave(rows * OC, 0.7f, 0.37f, 0.9f);
    const ExpertOperand in(DType::bf16, x.data(), rows * IC), dy(DType::bf16, dout.data(), rows * OC);
    std::vector<float> out(static_cast<size_t>(rows * OC), -7.0f), din(static_cast<size_t>(rows * IC), 0.25f);
    experts_linear_forward(route, out.data(), in, w.p);
    experts_linear_backward(route, din.data(), dy, in, w.p);
    const std::string where = cpu::lowp_gemm_backend(DType::bf16);
    int64_t row0 = 0;
    for (int e = 0; e < E; ++e) {
      const float* we = w.p.data() + int64_t{e} * OC * IC;
      for (int64_t r = row0; r < row0 + counts[e]; ++r) {
        for (int o = 0; o < OC; ++o) {
          double ref = 0, mag = 0;
          for (int k = 0; k < IC; ++k) {
            const double p = bf16(x[r * IC + k]) * bf16(we[o * IC + k]);
            ref += p, mag += std::fabs(p);
          }
          EXPECT_NEAR(out[r * OC + o], ref, bound(IC, mag)) << where << " expert " << e << " row " << r;
        }
        for (int k = 0; k < IC; ++k) {
          double ref = 0.25, mag = 0.25;
          for (int o = 0; o < OC; ++o) {
            const double p = bf16(dout[r * OC + o]) * bf16(we[o * IC + k]);
            ref += p, mag += std::fabs(p);
          }
          EXPECT_NEAR(din[r * IC + k], ref, bound(OC + 1, mag)) << where << " expert " << e << " din row " << r;
        }
      }
      for (int o = 0; o < OC; ++o) {
        for (int k = 0; k < IC; ++k) {
          double ref = 0, mag = 0;
          for (int64_t r = row0; r < row0 + counts[e]; ++r) {
            const double p = bf16(dout[r * OC + o]) * bf16(x[r * IC + k]);
            ref += p, mag += std::fabs(p);
          }
          const float got = w.p.grad_data()[int64_t{e} * OC * IC + o * IC + k];
          EXPECT_NEAR(got, ref, bound(static_cast<int>(counts[e]) + 1, mag)) << where << " expert " << e << " dW";
        }
      }
      row0 += counts[e];
    }
  }
  cpu::set_lowp_gemm_backend(DType::bf16, cpu::choose_lowp_gemm_backend(DType::bf16, std::getenv("NDT_LOWP_GEMM")));
}

}  // namespace
}  // namespace ndt
