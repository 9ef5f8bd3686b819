// The CUDA elementwise kernels against their CPU twins on random inputs: the small
// helpers, casts (bit for bit), GELU and SwiGLU, AdamW, embedding, cross-entropy with
// z-loss (fused and in vocab-slice pieces), the vocab-slice embedding and RoPE; forward kernels overwrite, backward ones add (+=) into what the
// gradients held before (random here, so an overwrite fails).
#include "../common/errors.h"
#include "../common/gradcheck.h"
#include "core/targets.h"
#include "cuda_test.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cmath>
#include <limits>
#include <vector>

namespace ndt {
namespace {

using testing::CudaTest;
using testing::expect_close;
using testing::on_device;
using testing::on_host;
using testing::random_vector;

class CudaElementwise : public CudaTest {};

TEST_F(CudaElementwise, HelpersMatchCpu) {
  const int64_t rows = 7, C = 45, n = rows * C;
  std::vector<float> y = random_vector(n, 1), x = random_vector(n, 2), bias = random_vector(C, 3),
                     dbias = random_vector(C, 4);
  Tensor dy = on_device(y), dx = on_device(x), dbias_d = on_device(bias), ddb = on_device(dbias);
  kernels::add_inplace(dy.data<float>(), dx.data<float>(), n);
  kernels::add_bias(dy.data<float>(), dbias_d.data<float>(), rows, C);
  kernels::bias_backward(ddb.data<float>(), dy.data<float>(), rows, C);
  cpu::add_inplace(y.data(), x.data(), n);
  cpu::add_bias(y.data(), bias.data(), rows, C);
  cpu::bias_backward(dbias.data(), y.data(), rows, C);
  EXPECT_EQ(on_host<float>(dy), y) << "one add per element: the same bits";
  EXPECT_EQ(on_host<float>(ddb), dbias) << "rows added in the same order n = 0..rows-1";
  Tensor filled = on_device(x), copied = on_device(y);
  kernels::fill(filled.data<float>(), 2.5f, n);
  EXPECT_EQ(on_host<float>(filled), std::vector<float>(static_cast<size_t>(n), 2.5f));
  kernels::copy(copied.data<float>(), dx.data<float>(), n);
  EXPECT_EQ(on_host<float>(copied), x);
  kernels::zero(copied.data<float>(), n);
  EXPECT_EQ(on_host<float>(copied), std::vector<float>(static_cast<size_t>(n), 0.0f));
}

TEST_F(CudaElementwise, CastsGiveTheCpuBits) {
  std::vector<float> x = random_vector(1000, 5, 100.0f);
  // Ties, overflow for f16, subnormals, signed zero, infinities.
  const float more[] = {1.00390625f, 1.01171875f, 65520.0f, 1e6f, -1e6f, 1e-40f, -0.0f, 3e-8f,
                        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  x.insert(x.end(), std::begin(more), std::end(more));
  const auto n = static_cast<int64_t>(x.size());
  for (DType dtype : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> bits(x.size());
    std::vector<float> back(x.size()), rounded = x;
    cpu::cast_to_lowp(dtype, x.data(), bits.data(), n);
    cpu::cast_from_lowp(dtype, bits.data(), back.data(), n);
    cpu::round_to_lowp(dtype, rounded.data(), n);
    Tensor dx = on_device(x), dbits = on_device(bits), dback = on_device(back), drounded = on_device(x);
    kernels::cast_to_lowp(dtype, dx.data<float>(), dbits.data<uint16_t>(), n);
    kernels::cast_from_lowp(dtype, dbits.data<uint16_t>(), dback.data<float>(), n);
    kernels::round_to_lowp(dtype, drounded.data<float>(), n);
    EXPECT_EQ(on_host<uint16_t>(dbits), bits) << dtype_name(dtype);
    EXPECT_EQ(on_host<float>(dback), back) << dtype_name(dtype);
    EXPECT_EQ(on_host<float>(drounded), rounded) << dtype_name(dtype);
    // Rows into a wider stride (101 rows of 10 into rows 32 apart), the padding 0.
    std::vector<uint16_t> padded(101 * 32, 0xFFFF), want(padded.size(), 0);
    cpu::cast_rows_to_lowp(dtype, x.data(), 101, 10, want.data(), 32);
    Tensor dpadded = on_device(padded);
    kernels::cast_rows_to_lowp(dtype, dx.data<float>(), 101, 10, dpadded.data<uint16_t>(), 32);
    EXPECT_EQ(on_host<uint16_t>(dpadded), want) << dtype_name(dtype);
  }
  std::vector<float> nan(1, std::numeric_limits<float>::quiet_NaN());
  Tensor dnan = on_device(nan);
  kernels::round_to_lowp(DType::bf16, dnan.data<float>(), 1);
  EXPECT_TRUE(std::isnan(on_host<float>(dnan)[0])) << "NaN stays NaN";
  testing::expect_error([&] { kernels::round_to_lowp(DType::f32, dnan.data<float>(), 1); }, {"round_to_lowp", "f32"});
}

TEST_F(CudaElementwise, ActivationsMatchCpu) {
  const int64_t n = 3001;
  const std::vector<float> x = random_vector(n, 6, 3.0f), up = random_vector(n, 7), dout = random_vector(n, 8);
  std::vector<float> out(n), dinp = random_vector(n, 9), dgate = random_vector(n, 10), dup = random_vector(n, 11);
  Tensor dx = on_device(x), dup_in = on_device(up), ddout = on_device(dout), dout_gelu = on_device(out);
  Tensor ddinp = on_device(dinp), ddgate = on_device(dgate), ddup = on_device(dup), dout_swiglu = on_device(out);
  kernels::gelu_forward(dout_gelu.data<float>(), dx.data<float>(), n);
  kernels::gelu_backward(ddinp.data<float>(), dx.data<float>(), ddout.data<float>(), n);
  kernels::swiglu_forward(dout_swiglu.data<float>(), dx.data<float>(), dup_in.data<float>(), n);
  kernels::swiglu_backward(ddgate.data<float>(), ddup.data<float>(), ddout.data<float>(), dx.data<float>(),
                           dup_in.data<float>(), n);
  std::vector<float> swiglu(n);
  cpu::gelu_forward(out.data(), x.data(), n);
  cpu::gelu_backward(dinp.data(), x.data(), dout.data(), n);
  cpu::swiglu_forward(swiglu.data(), x.data(), up.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), x.data(), up.data(), n);
  expect_close(on_host<float>(dout_gelu), out, 4, "gelu_forward");
  expect_close(on_host<float>(ddinp), dinp, 4, "gelu_backward (+=)");
  expect_close(on_host<float>(dout_swiglu), swiglu, 4, "swiglu_forward");
  expect_close(on_host<float>(ddgate), dgate, 4, "swiglu_backward dgate (+=)");
  expect_close(on_host<float>(ddup), dup, 4, "swiglu_backward dup (+=)");
}

TEST_F(CudaElementwise, AdamWMatchesCpu) {
  const int64_t n = 777;
  std::vector<float> p = random_vector(n, 12), g = random_vector(n, 13), m = random_vector(n, 14, 0.1f),
                     v = random_vector(n, 15, 0.1f);
  for (float& vi : v) vi = vi * vi;
  Tensor dp = on_device(p), dg = on_device(g), dm = on_device(m), dv = on_device(v);
  const kernels::AdamWStep step{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7};
  kernels::adamw_update(dp.data<float>(), dg.data<float>(), dm.data<float>(), dv.data<float>(), n, step);
  cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, step);
  expect_close(on_host<float>(dp), p, 4, "adamw param");
  expect_close(on_host<float>(dm), m, 4, "adamw m");
  expect_close(on_host<float>(dv), v, 4, "adamw v");
}

TEST_F(CudaElementwise, EmbeddingMatchesCpuBitForBit) {
  const int N = 23, C = 17, V = 9;
  std::vector<int32_t> ids(N);
  for (int n = 0; n < N; ++n) ids[n] = (n * 7 + 3) % V;  // repeated ids: backward sums rows
  const std::vector<float> table = random_vector(V * C, 16), dout = random_vector(N * C, 17);
  std::vector<float> out = random_vector(N * C, 18), dtable = random_vector(V * C, 19);
  Tensor dids = on_device(ids), dtab = on_device(table), ddout = on_device(dout), dout_acc = on_device(out),
         ddtable = on_device(dtable);
  kernels::embedding_forward(dout_acc.data<float>(), dids.data<int32_t>(), dtab.data<float>(), N, C, true);
  kernels::embedding_backward(ddtable.data<float>(), ddout.data<float>(), dids.data<int32_t>(), N, C);
  cpu::embedding_forward(out.data(), ids.data(), table.data(), N, C, true);
  cpu::embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
  EXPECT_EQ(on_host<float>(dout_acc), out);
  EXPECT_EQ(on_host<float>(ddtable), dtable) << "rows added in order n = 0..N-1, as on the cpu";
}

TEST_F(CudaElementwise, CrossEntropyWithZLossMatchesCpu) {
  const int N = 11, V = 301;
  const std::vector<int32_t> targets = {0, 300, 5, kIgnoredTarget, 17, 17, 299, 1, kIgnoredTarget, 150, 42};
  for (float z_loss : {0.0f, 1e-4f}) {
    std::vector<float> logits = random_vector(N * V, 20, 4.0f), losses(N), z(N);
    Tensor dlogits = on_device(logits), dtargets = on_device(targets), dlosses = on_device(losses), dz = on_device(z);
    kernels::softmax_cross_entropy(dlogits.data<float>(), dlosses.data<float>(), dtargets.data<int32_t>(), N, V,
                                   0.25f, z_loss, dz.data<float>());
    cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, 0.25f, z_loss, z.data());
    expect_close(on_host<float>(dlosses), losses, V, "cross-entropy losses");
    expect_close(on_host<float>(dz), z, V, "z-losses");
    expect_close(on_host<float>(dlogits), logits, V, "cross-entropy gradient");
  }
  std::vector<int32_t> bad = targets;
  bad[4] = V;
  std::vector<float> logits = random_vector(N * V, 21), losses(N);
  Tensor dlogits = on_device(logits), dbad = on_device(bad), dlosses = on_device(losses);
  testing::expect_error([&] { kernels::softmax_cross_entropy(dlogits.data<float>(), dlosses.data<float>(),
                                                             dbad.data<int32_t>(), N, V, 1.0f, 0.0f, nullptr); },
                        {"softmax_cross_entropy", "target 301 of row 4", "[0, 301)"});
  EXPECT_EQ(on_host<float>(dlogits), logits) << "a refused call touches nothing";
}

// The vocab-parallel pieces on two slices of the vocabulary, each against the CPU's.
TEST_F(CudaElementwise, VocabSlicePiecesMatchCpu) {
  const int N = 7, V = 90, C = 12;
  const std::vector<int32_t> targets = {3, 89, 44, kIgnoredTarget, 45, 0, 60};
  for (int64_t begin : {int64_t{0}, int64_t{45}}) {
    std::vector<float> logits = random_vector(N * V, 26, 3.0f), row_max(N), sums(N), target_logit(N), losses(N), z(N);
    Tensor dl = on_device(logits), dt = on_device(targets), dmax = on_device(row_max), dsums = on_device(sums),
           dtarget = on_device(target_logit), dlosses = on_device(losses), dz = on_device(z);
    kernels::cross_entropy_row_max(dl.data<float>(), dmax.data<float>(), N, V);
    kernels::cross_entropy_exp_sums(dl.data<float>(), dmax.data<float>(), dt.data<int32_t>(), begin,
                                    dsums.data<float>(), dtarget.data<float>(), N, V, true);
    kernels::cross_entropy_finish(dl.data<float>(), dlosses.data<float>(), dmax.data<float>(), dsums.data<float>(),
                                  dtarget.data<float>(), dt.data<int32_t>(), begin, N, V, 0.5f, 1e-4f,
                                  dz.data<float>());
    cpu::cross_entropy_row_max(logits.data(), row_max.data(), N, V);
    cpu::cross_entropy_exp_sums(logits.data(), row_max.data(), targets.data(), begin, sums.data(),
                                target_logit.data(), N, V, true);
    cpu::cross_entropy_finish(logits.data(), losses.data(), row_max.data(), sums.data(), target_logit.data(),
                              targets.data(), begin, N, V, 0.5f, 1e-4f, z.data());
    EXPECT_EQ(on_host<float>(dmax), row_max);
    EXPECT_EQ(on_host<float>(dtarget), target_logit);
    expect_close(on_host<float>(dsums), sums, V, "exp sums");
    expect_close(on_host<float>(dlosses), losses, V, "losses");
    expect_close(on_host<float>(dz), z, V, "z-losses");
    expect_close(on_host<float>(dl), logits, V, "gradient of the slice");

    const std::vector<float> table = random_vector(45 * C, 27), dout = random_vector(N * C, 28);
    std::vector<float> out = random_vector(N * C, 29), dtable = random_vector(45 * C, 30);
    Tensor dtab = on_device(table), ddout = on_device(dout), dout_r = on_device(out), ddtab = on_device(dtable);
    kernels::embedding_forward_range(dout_r.data<float>(), dt.data<int32_t>(), dtab.data<float>(), begin, 45, N, C);
    kernels::embedding_backward_range(ddtab.data<float>(), ddout.data<float>(), dt.data<int32_t>(), begin, 45, N, C);
    cpu::embedding_forward_range(out.data(), targets.data(), table.data(), begin, 45, N, C);
    cpu::embedding_backward_range(dtable.data(), dout.data(), targets.data(), begin, 45, N, C);
    EXPECT_EQ(on_host<float>(dout_r), out) << "owned rows copied, the others zero";
    EXPECT_EQ(on_host<float>(ddtab), dtable) << "rows added in order";
  }
}

TEST_F(CudaElementwise, RopeMatchesCpu) {
  const int B = 2, T = 9, H = 3, D = 16, n = B * T * H * D;
  RopeFrequencies llama3(500000.0f);
  llama3.scaling_factor = 8.0f;
  std::vector<int32_t> positions(B * T);
  for (int r = 0; r < B * T; ++r) positions[r] = (r * 5) % 13;
  for (const RopeFrequencies& f : {RopeFrequencies(10000.0f), llama3}) {
    const std::vector<float> x = random_vector(n, 22);
    std::vector<float> out(n), out_at(n), dinp = random_vector(n, 23), dinp_at = random_vector(n, 24);
    Tensor dx = on_device(x), dpos = on_device(positions), dout = on_device(out), dout_at = on_device(out_at),
           ddinp = on_device(dinp), ddinp_at = on_device(dinp_at);
    kernels::rope_forward(dout.data<float>(), dx.data<float>(), B, T, H, D, 5, f);
    kernels::rope_backward(ddinp.data<float>(), dx.data<float>(), B, T, H, D, 5, f);
    kernels::rope_forward_at(dout_at.data<float>(), dx.data<float>(), B, T, H, D, dpos.data<int32_t>(), f);
    kernels::rope_backward_at(ddinp_at.data<float>(), dx.data<float>(), B, T, H, D, dpos.data<int32_t>(), f);
    cpu::rope_forward(out.data(), x.data(), B, T, H, D, 5, f);
    cpu::rope_backward(dinp.data(), x.data(), B, T, H, D, 5, f);
    cpu::rope_forward_at(out_at.data(), x.data(), B, T, H, D, positions.data(), f);
    cpu::rope_backward_at(dinp_at.data(), x.data(), B, T, H, D, positions.data(), f);
    expect_close(on_host<float>(dout), out, 4, "rope_forward");
    expect_close(on_host<float>(ddinp), dinp, 4, "rope_backward (+=)");
    expect_close(on_host<float>(dout_at), out_at, 4, "rope_forward_at");
    expect_close(on_host<float>(ddinp_at), dinp_at, 4, "rope_backward_at (+=)");
  }
  positions[7] = -2;
  Tensor dpos = on_device(positions), dx = on_device(random_vector(n, 25)), dout = on_device(std::vector<float>(n));
  testing::expect_error([&] { kernels::rope_forward_at(dout.data<float>(), dx.data<float>(), B, T, H, D,
                                                       dpos.data<int32_t>(), RopeFrequencies(10000.0f)); },
                        {"rope", "position -2 of row 7", "negative"});
}

}  // namespace
}  // namespace ndt
