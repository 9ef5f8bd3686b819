// The fused projections (model/fused_projections.h): q, k and v of a block as one bf16
// GEMM each way, against a double reference of the same rounded operands (products exact,
// sums in fp32: within 1e-6 of the sum of magnitudes; the outputs then within half a bf16
// ulp of rounding), on GPT-2 (biases between the weights: copied side by side, one weight
// GEMM per layer) and Llama (adjacent: read in place, one weight GEMM), on every GEMM
// backend this CPU has; the split (zero-bubble) weight half bitwise the fused one; fp32,
// fp8 and adapters on the per-layer path.
#include "kernels/cpu/gemm_lowp.h"
#include "kernels/kernels.h"
#include "model/fused_projections.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "lowp_support.h"
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace ndt {
namespace {

using testing::bf16;
using testing::wave;

// A block's q, k, v with the test's own operand scratch.
struct Projections {
  std::array<ColumnParallelLinear, 3> layers;
  std::vector<uint16_t> a, b, fused;
  MatmulPrecision mp;
  Projections(const ParameterStore& store, int rows) {
    const char* names[] = {"wq", "wk", "wv"};
    for (size_t i = 0; i < 3; ++i) {
      const std::string base = std::string("blocks.1.attn.") + names[i];
      layers[i].weight = &store.get(base + ".weight");
      layers[i].bias = store.params().end() != std::find_if(store.params().begin(), store.params().end(),
                                                            [&](const Parameter& p) { return p.name() == base + ".bias"; })
                           ? &store.get(base + ".bias")
                           : nullptr;
      layers[i].precision = &mp;
    }
    const int64_t C = layers[0].weight->local_shape[1], W = 3 * C;
    a.resize(static_cast<size_t>(rows * W)), b.resize(a.size()), fused.resize(static_cast<size_t>(W * C));
    mp = {.dtype = DType::bf16,
          .a = a.data(),
          .b = b.data(),
          .capacity = static_cast<int64_t>(a.size()),
          .fused_weights = fused.data(),
          .fused_weights_capacity = static_cast<int64_t>(fused.size()),
          .kept = {}};
  }
  FusedProjections fused_layers() const { return FusedProjections({&layers[0], &layers[1], &layers[2]}); }
};

// Catches: a layer's output written into another's, a bias dropped, the input or the
// weights not rounded (or rounded twice), a dinp that misses a layer, weight gradients
// at the wrong columns of the gathered output gradient.
TEST(FusedProjections, EqualADoubleReferenceOfTheRoundedOperands) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    ModelConfig c = testing::tiny(arch, /*qk_norm=*/false);
    Transformer model(c, 7, 4);
    model.set_precision({DType::bf16, false, {}});
    ParameterStore& store = model.store();
    for (Parameter& p : store.params()) {  // nonzero biases, so a dropped one shows
      if (p.name().ends_with(".bias")) kernels::copy(p.data(), wave(p.numel(), 0.5f, 0.7f).data(), p.numel());
    }
    store.refresh_compute();
    const int rows = 11, C = c.d_model;
    Projections proj(store, rows);
    const FusedProjections fused = proj.fused_layers();
    ASSERT_TRUE(fused.active());
    const std::vector<float> x = wave(rows * C, 2.0f, 0.37f);
    for (cpu::LowpGemmBackend backend : testing::lowp_backends(DType::bf16)) {
      cpu::set_lowp_gemm_backend(DType::bf16, backend);
      store.zero_grads();
      std::array<std::vector<float>, 3> out, dout;
      std::vector<float> scratch(static_cast<size_t>(rows * fused.width()));
      std::vector<float> dinp(static_cast<size_t>(rows * C), 0.0f);
      float* outs[3];
      const float* douts[3];
      for (size_t i = 0; i < 3; ++i) {
        out[i].assign(static_cast<size_t>(rows * fused.out_features(static_cast<int>(i))), 0.0f);
        dout[i] = wave(static_cast<int64_t>(out[i].size()), 0.3f, 0.11f + 0.05f * static_cast<float>(i));
        outs[i] = out[i].data(), douts[i] = dout[i].data();
      }
      fused.forward(outs, x.data(), rows, scratch.data());
      fused.backward(dinp.data(), douts, x.data(), rows);
      std::vector<double> dinp_ref(dinp.size(), 0.0), dinp_magnitude(dinp.size(), 0.0);
      for (size_t i = 0; i < 3; ++i) {
        const ColumnParallelLinear& l = proj.layers[i];
        const int OC = static_cast<int>(l.weight->local_shape[0]);
        const float* w = l.weight->data();
        for (int r = 0; r < rows; ++r) {
          for (int o = 0; o < OC; ++o) {
            double ref = 0, magnitude = 0;
            for (int k = 0; k < C; ++k) {
              const double p = bf16(x[static_cast<size_t>(r * C + k)]) * bf16(w[o * C + k]);
              ref += p, magnitude += std::fabs(p);
              const double q = bf16(dout[i][static_cast<size_t>(r * OC + o)]) * bf16(w[o * C + k]);
              dinp_ref[static_cast<size_t>(r * C + k)] += q, dinp_magnitude[static_cast<size_t>(r * C + k)] += std::fabs(q);
            }
            if (l.bias) ref += l.bias->data()[o];
            const float got = out[i][static_cast<size_t>(r * OC + o)];
            EXPECT_EQ(got, bf16(got)) << "not rounded: layer " << i;
            EXPECT_NEAR(got, ref, std::ldexp(std::fabs(ref), -8) + 1e-6 * magnitude) << arch_name(arch) << " layer " << i;
          }
        }
        for (int o = 0; o < OC; ++o) {
          double db = 0;
          for (int k = 0; k < C; ++k) {
            double ref = 0, magnitude = 0;
            for (int r = 0; r < rows; ++r) {
              const double p = bf16(dout[i][static_cast<size_t>(r * OC + o)]) * bf16(x[static_cast<size_t>(r * C + k)]);
              ref += p, magnitude += std::fabs(p);
            }
            EXPECT_NEAR(l.weight->grad_data()[o * C + k], ref, 1e-6 * magnitude) << arch_name(arch) << " dW " << i;
          }
          for (int r = 0; r < rows; ++r) db += dout[i][static_cast<size_t>(r * OC + o)];
          if (l.bias) {
            EXPECT_NEAR(l.bias->grad_data()[o], db, 1e-5) << arch_name(arch) << " db " << i;
          }
        }
      }
      for (size_t j = 0; j < dinp.size(); ++j) EXPECT_NEAR(dinp[j], dinp_ref[j], 1e-6 * dinp_magnitude[j]) << j;
    }
    cpu::set_lowp_gemm_backend(DType::bf16, cpu::choose_lowp_gemm_backend(DType::bf16, std::getenv("NDT_LOWP_GEMM")));
  }
}

// Catches: a deferred weight half (zero-bubble) that rounds or lays out the output
// gradients otherwise than the fused backward, so split and fused training diverge.
TEST(FusedProjections, SplitWeightHalfIsBitwiseTheFusedOne) {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    ModelConfig c = testing::tiny(arch, /*qk_norm=*/false);
    Transformer model(c, 3, 4);
    model.set_precision({DType::bf16, false, {}});
    ParameterStore& store = model.store();
    const int rows = 6, C = c.d_model;
    Projections proj(store, rows);
    const FusedProjections fused = proj.fused_layers();
    const std::vector<float> x = wave(rows * C, 1.5f, 0.23f);
    std::array<std::vector<float>, 3> dout;
    std::array<kernels::ColumnBlock, 3> blocks;
    const float* douts[3];
    for (size_t i = 0; i < 3; ++i) {
      dout[i] = wave(rows * fused.out_features(static_cast<int>(i)), 0.4f, 0.19f * static_cast<float>(i + 1));
      douts[i] = dout[i].data(), blocks[i] = {dout[i].data(), nullptr, fused.out_features(static_cast<int>(i))};
    }
    std::vector<float> d1(static_cast<size_t>(rows * C), 0.0f), d2(d1);
    store.zero_grads();
    fused.backward(d1.data(), douts, x.data(), rows);
    const std::vector<float> whole(store.grads().data<float>(), store.grads().data<float>() + store.grad_numel());
    store.zero_grads();
    fused.backward_input(d2.data(), douts, rows);
    std::vector<float> cat(static_cast<size_t>(rows * fused.width()));
    kernels::gather_columns(blocks.data(), 3, rows, cat.data());
    fused.backward_weight(cat.data(), x.data(), rows);
    const std::vector<float> split(store.grads().data<float>(), store.grads().data<float>() + store.grad_numel());
    EXPECT_EQ(d1, d2) << arch_name(arch);
    EXPECT_EQ(whole, split) << arch_name(arch);
  }
}

// Catches: the fused path taken where it is not exact or not wired (fp32, whose bits
// must not change; fp8's per-layer scales; an adapter's extra output).
TEST(FusedProjections, PerLayerPathForFp32Fp8AndAdapters) {
  Transformer model(testing::tiny(Arch::llama, false), 3, 4);
  model.set_precision({DType::bf16, false, {}});
  Projections proj(model.store(), 4);
  EXPECT_TRUE(proj.fused_layers().active());
  proj.mp.dtype = DType::f32;
  EXPECT_FALSE(proj.fused_layers().active());
  proj.mp.dtype = DType::bf16;
  Transformer fp8_model(testing::tiny(Arch::llama, false), 3, 4);
  fp8_model.set_precision({DType::bf16, /*fp8=*/true, {}});
  proj.mp.fp8 = fp8_model.fp8();
  EXPECT_FALSE(proj.fused_layers().active());
  proj.mp.fp8 = nullptr;
  LoraAdapter adapter;
  proj.layers[1].lora = &adapter;
  EXPECT_FALSE(proj.fused_layers().active());
}

}  // namespace
}  // namespace ndt
