// Low-precision compute on one rank (model/precision.h): bf16 and fp16 forward and
// backward stay close to fp32 (the loss, and every gradient in L2; MoE models' routed
// experts too), on both GEMM backends, which differ only in the order of fp32 sums; the values a block computes
// with are those it keeps, so activation checkpointing and two micro-batches in flight
// give bitwise the gradients of saving everything; the matmuls read the parameters'
// compute copies, which refresh_compute() recasts; the ledger equals the memory model
// and a block's saved activations take about half the fp32 bytes. The mesh
// invariance of low precision is in tests/mpi/test_precision.cpp, the training curves
// in tests/train/test_precision.cpp.
#include "core/memory.h"
#include "kernels/cpu/gemm_lowp.h"
#include "model/matmul.h"
#include "model/transformer.h"
#include "../common/errors.h"
#include "lowp_support.h"
#include "tiny_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace ndt {
namespace {

using testing::tokens;

ModelConfig tiny(Arch arch) {
  ModelConfig c = testing::tiny(arch, /*qk_norm=*/arch == Arch::llama);
  c.n_layer = 3;
  return c;
}

// The tiny models with 4 routed experts, top-2, in every block (model/moe.h); Llama's
// with a shared MLP.
ModelConfig tiny_moe(Arch arch) {
  ModelConfig c = tiny(arch);
  c.n_experts = 4;
  c.moe_top_k = 2;
  c.moe_d_ff = 12;
  c.moe_aux_loss = 0.01f;
  c.moe_shared_d_ff = arch == Arch::llama ? 8 : 0;
  return c;
}

std::string label(const ModelConfig& c) { return std::string(arch_name(c.arch)) + (c.is_moe() ? " moe" : ""); }

struct Result {
  double loss = 0;
  std::vector<float> grads;
  std::vector<float> expert_grads;  // the routed experts' weights', in arena order
};

Result run(const ModelConfig& c, DType compute, const ActivationCheckpointing& policy = {}) {
  const int B = 2, T = 7;
  const auto in = tokens(B * T, c.vocab_size, 1), target = tokens(B * T, c.vocab_size, 2);
  Transformer model(c, 11, /*loss_chunk_rows=*/5);
  model.set_precision({compute, false, {}});
  model.set_activation_checkpointing(policy);
  model.store().zero_grads();
  Result r;
  r.loss = model.forward_backward(in.data(), target.data(), B, T, 1.0f / (B * T));
  const float* g = model.store().grads().data<float>();
  r.grads.assign(g, g + model.store().numel());
  for (const Parameter& p : model.store().params()) {
    if (p.spec.expert) r.expert_grads.insert(r.expert_grads.end(), g + p.arena_offset, g + p.arena_offset + p.numel());
  }
  return r;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += (a[i] - b[i]) * double(a[i] - b[i]), norm += double(b[i]) * b[i];
  return std::sqrt(diff / norm);
}

const char* name(DType d) { return d == DType::bf16 ? "bf16" : "fp16"; }

// The GEMM backends a low-precision run can use on this CPU for `dtype`: oneDNN's
// native kernel where it has one (AMX or AVX512-BF16; its jit gemm under CTest's run
// with ONEDNN_MAX_CPU_ISA=AVX512_CORE) and the fallback.
// Catches: a low-precision path that computes something else (a wrong operand, a
// missing rounding step that changes magnitudes, a transposed weight, an expert's GEMM
// with another expert's slice), which shows as far more than the rounding error of 8
// (bf16) or 11 (fp16) mantissa bits, on any GEMM backend; routed experts that compute
// in fp32 (their gradients would not move).
TEST(Precision, LowPrecisionStaysCloseToFp32) {
  for (const ModelConfig& c : {tiny(Arch::gpt2), tiny(Arch::llama), tiny_moe(Arch::gpt2), tiny_moe(Arch::llama)}) {
    const Result fp32 = run(c, DType::f32);
    for (DType d : {DType::bf16, DType::f16}) {
      for (cpu::LowpGemmBackend backend : testing::lowp_backends(d)) {
        cpu::set_lowp_gemm_backend(d, backend);
        const Result low = run(c, d);
        const std::string where = label(c) + " " + name(d) + " on " + cpu::lowp_gemm_backend(d);
        const double experts = c.is_moe() ? relative_l2(low.expert_grads, fp32.expert_grads) : 0;
        std::printf("%s: loss %.2e relative, gradients %.2e relative L2%s\n", where.c_str(),
                    std::fabs(low.loss - fp32.loss) / fp32.loss, relative_l2(low.grads, fp32.grads),
                    c.is_moe() ? (", the routed experts' " + std::to_string(experts)).c_str() : "");
        // The operands are rounded to 8 (bf16) or 11 (fp16) significant bits, products
        // summed in fp32 on every backend, so the errors are rounding's, whatever the sum
        // order: measured (gpt2 / llama) bf16 loss 7.0e-4 / 2.5e-3 relative, gradients
        // 9.9e-3 / 2.2e-2 in L2, to three digits the same on AMX, AVX512-BF16, oneDNN's
        // jit gemm and the fallback; fp16 8.0e-5 / 1.3e-5 and 9.3e-4 /
        // 3.1e-3 (3 more bits: 8x finer). The MoE models (AMX and the fallback): bf16
        // 1.0e-3 / 4.2e-4 and 1.9e-2 / 2.5e-2 (the experts' 1.7e-2 / 1.8e-2), fp16
        // 1.7e-5 / 8.3e-5 and 2.0e-3 / 2.6e-3 (2.0e-3 / 2.5e-3). The bounds leave a
        // factor of 2 or more.
        const double tol = d == DType::bf16 ? 1 : 0.125;
        EXPECT_NEAR(low.loss, fp32.loss, 1e-2 * tol * fp32.loss) << where;
        EXPECT_LT(relative_l2(low.grads, fp32.grads), 5e-2 * tol) << where;
        EXPECT_GT(relative_l2(low.grads, fp32.grads), 0) << "nothing was rounded: " << where;
        if (c.is_moe()) {
          EXPECT_LT(experts, 5e-2 * tol) << where;
          EXPECT_GT(experts, 0) << "the experts rounded nothing: " << where;
        }
      }
      cpu::set_lowp_gemm_backend(d, cpu::choose_lowp_gemm_backend(d, std::getenv("NDT_LOWP_GEMM")));
    }
  }
}

// Catches: a backend that differs by more than summation order (for example one that
// rounds its fp32 output or accumulates in bf16).
TEST(Precision, BothGemmBackendsAgree) {
  if (cpu::onednn_lowp_impl(DType::bf16).empty()) GTEST_SKIP() << "oneDNN has no native bf16 matmul on this CPU";
  const ModelConfig c = tiny(Arch::llama);
  cpu::set_lowp_gemm_backend(DType::bf16, cpu::LowpGemmBackend::fallback);
  const Result fallback = run(c, DType::bf16);
  cpu::set_lowp_gemm_backend(DType::bf16, cpu::LowpGemmBackend::onednn);
  const Result onednn = run(c, DType::bf16);
  cpu::set_lowp_gemm_backend(DType::bf16, cpu::choose_lowp_gemm_backend(DType::bf16, std::getenv("NDT_LOWP_GEMM")));
  EXPECT_NEAR(onednn.loss, fallback.loss, 1e-5 * fallback.loss);
  // A different sum order can flip a rounding to bf16 of a linear output, one bf16
  // ulp (2^-8): the gradients agree to about that.
  EXPECT_LT(relative_l2(onednn.grads, fallback.grads), 1e-2);
}

// Catches: forward computing with values other than those backward reads (a missing
// rounding of a kept tensor), and packed activations leaking between micro-batches.
TEST(Precision, CheckpointingAndInterleavedMicroBatchesAreBitwise) {
  for (const ModelConfig& c : {tiny(Arch::gpt2), tiny(Arch::llama), tiny_moe(Arch::gpt2), tiny_moe(Arch::llama)}) {
    const std::string arch = label(c);
    const Result all = run(c, DType::bf16);
    for (const ActivationCheckpointing& p :
         {ActivationCheckpointing{CheckpointMode::full, 1}, {CheckpointMode::full, 2}, {CheckpointMode::selective, 1}}) {
      const Result r = run(c, DType::bf16, p);
      EXPECT_EQ(r.loss, all.loss) << arch << " " << checkpoint_mode_name(p.mode) << " " << p.every;
      EXPECT_EQ(r.grads, all.grads) << arch << " " << checkpoint_mode_name(p.mode) << " " << p.every;
    }
    // Two micro-batches in flight (forward A, forward B, backward B, backward A): each
    // backward reloads the shared area from its own context's packed copy, so the
    // gradients equal those of recomputing everything (nothing packed to mix up).
    const int B = 2, T = 7;
    const auto in = tokens(2 * B * T, c.vocab_size, 1), target = tokens(2 * B * T, c.vocab_size, 2);
    std::vector<float> packed, recomputed;
    for (CheckpointMode mode : {CheckpointMode::none, CheckpointMode::full}) {
      Transformer model(c, 11, 5);
      model.set_precision({DType::bf16, false, {}});
      model.set_activation_checkpointing({mode, 1});
      model.store().zero_grads();
      MicroBatchContext a, b;
      model.prepare(a, in.data(), target.data(), B, T, 0.25f, false);
      model.prepare(b, in.data() + B * T, target.data() + B * T, B, T, 0.25f, false);
      testing::run_interleaved(model, a, b);
      const float* g = model.store().grads().data<float>();
      (mode == CheckpointMode::none ? packed : recomputed).assign(g, g + model.store().numel());
    }
    EXPECT_EQ(packed, recomputed) << arch;
  }
}

// Catches: matmuls (the dense layers' and the routed experts') reading the fp32 values
// instead of the compute copy, or a copy that refresh_compute() does not recast.
TEST(Precision, MatmulsReadTheComputeCopy) {
  for (const auto& [c, weight] : {std::pair{tiny(Arch::gpt2), "blocks.0.mlp.fc.weight"},
                                  {tiny_moe(Arch::llama), "blocks.0.moe.experts.down.weight"}}) {
    const int B = 1, T = 5;
    const auto in = tokens(B * T, c.vocab_size, 4);
    Transformer model(c, 3, 5);
    model.set_precision({DType::bf16, false, {}});
    const double before = model.evaluate(in.data(), in.data(), B, T);
    // Change a matmul weight's master value: the stale copy still gives the old loss...
    const Parameter& w = model.store().get(weight);
    for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] *= 3.0f;
    EXPECT_EQ(model.evaluate(in.data(), in.data(), B, T), before) << weight;
    // ... and the recast copy the new one.
    model.store().refresh_compute();
    EXPECT_NE(model.evaluate(in.data(), in.data(), B, T), before) << weight;
    for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(w.compute_data()[i], f32_to_bf16(w.data()[i]));
  }
}

// Catches: an output gradient of a width that is not a multiple of 32 (the vocabulary, 13
// here; GPT-2's 50257) cast on contiguous rows (oneDNN read those 1.4-1.6x slower), a
// GEMM that reads the padded rows at the wrong stride, or padding that is not zero.
TEST(Precision, OddWidthOutputGradientIsMultipliedFromRows64BytesApart) {
  ModelConfig c = tiny(Arch::gpt2);
  Transformer model(c, 5, 4);
  model.set_precision({DType::bf16, false, {}});
  const Parameter& w = model.store().get("wte.weight");
  const int rows = 5, IC = static_cast<int>(w.local_shape[1]), OC = static_cast<int>(w.local_shape[0]);
  const int64_t ld = lowp_row_stride(OC);
  ASSERT_EQ(ld, 32) << "13 columns";
  EXPECT_EQ(lowp_row_stride(50257), 50272);
  EXPECT_EQ(lowp_row_stride(768), 768);
  std::vector<float> x(rows * IC), dout(rows * OC), dinp(rows * IC), dweight(w.numel());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = 0.3f * std::cos(0.11f * static_cast<float>(i));
  for (size_t i = 0; i < dinp.size(); ++i) dinp[i] = 0.01f * static_cast<float>(i % 7);
  for (size_t i = 0; i < dweight.size(); ++i) dweight[i] = -0.02f * static_cast<float>(i % 5);
  const std::vector<float> dinp0 = dinp, dweight0 = dweight;
  std::vector<uint16_t> a(static_cast<size_t>(rows * ld)), b(a.size());
  MatmulPrecision mp{
      .dtype = DType::bf16, .a = a.data(), .b = b.data(), .capacity = static_cast<int64_t>(a.size()), .kept = {}};
  // On each GEMM backend this CPU has (the padded rows' stride reaches both).
  for (cpu::LowpGemmBackend backend : testing::lowp_backends(DType::bf16)) {
    cpu::set_lowp_gemm_backend(DType::bf16, backend);
    const std::string where = cpu::lowp_gemm_backend(DType::bf16);
    std::fill(a.begin(), a.end(), uint16_t{0x7FC0});  // NaN: an unwritten read shows
    dinp = dinp0, dweight = dweight0;
    matmul_backward_into(mp, dinp.data(), dweight.data(), nullptr, dout.data(), x.data(), w, rows);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < ld; ++o) {
        ASSERT_EQ(a[r * ld + o], o < OC ? f32_to_bf16(dout[r * OC + o]) : uint16_t{0}) << r << ", " << o;
      }
    }
    // Against double sums of the bf16 operands' products (exact in fp32): += both.
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < IC; ++i) {
        double ref = dinp0[r * IC + i], magnitude = std::fabs(ref);
        for (int o = 0; o < OC; ++o) {
          const double p = testing::bf16(dout[r * OC + o]) * testing::bf16(w.data()[o * IC + i]);
          ref += p, magnitude += std::fabs(p);
        }
        EXPECT_NEAR(dinp[r * IC + i], ref, 1e-5 * magnitude) << "dinp " << r << ", " << i << " on " << where;
      }
    }
    for (int o = 0; o < OC; ++o) {
      for (int i = 0; i < IC; ++i) {
        double ref = dweight0[o * IC + i], magnitude = std::fabs(ref);
        for (int r = 0; r < rows; ++r) {
          const double p = testing::bf16(dout[r * OC + o]) * testing::bf16(x[r * IC + i]);
          ref += p, magnitude += std::fabs(p);
        }
        EXPECT_NEAR(dweight[o * IC + i], ref, 1e-5 * magnitude) << "dweight " << o << ", " << i << " on " << where;
      }
    }
  }
  cpu::set_lowp_gemm_backend(DType::bf16, cpu::choose_lowp_gemm_backend(DType::bf16, std::getenv("NDT_LOWP_GEMM")));
  // A scratch for contiguous rows only is refused by name, not overrun.
  mp.capacity = rows * OC;
  testing::expect_error(
      [&] { matmul_backward_into(mp, dinp.data(), dweight.data(), nullptr, dout.data(), x.data(), w, rows); },
      {"matmul output gradient", "5 rows 32 apart", std::to_string(rows * OC)});
}

// Catches: a kept operand rounded again after it was written (or never written), or
// a matmul that reads the scratch instead of it; an input without one not rounded.
TEST(Precision, KeptOperandIsRoundedOnceThenRead) {
  ModelConfig c = tiny(Arch::gpt2);
  Transformer model(c, 5, 4);
  model.set_precision({DType::bf16, false, {}});
  const Parameter& w = model.store().get("blocks.1.mlp.fc.weight");
  const int rows = 3, IC = static_cast<int>(w.local_shape[1]), OC = static_cast<int>(w.local_shape[0]);
  std::vector<float> x(rows * IC), other(x.size()), out(rows * OC), again(out.size()), expected(out.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)), other[i] = 2 * x[i];
  std::vector<uint16_t> a(rows * std::max(IC, OC)), b(a.size()), bits(x.size(), 0);
  MatmulPrecision mp{
      .dtype = DType::bf16, .a = a.data(), .b = b.data(), .capacity = static_cast<int64_t>(a.size()), .kept = {}};
  matmul_forward(mp, expected.data(), x.data(), w, nullptr, rows);  // no kept operand: through the scratch
  KeptOperand kept{x.data(), bits.data(), static_cast<int64_t>(x.size())};
  {
    const KeptOperandsScope scope(mp, {&kept, 1});
    std::fill(a.begin(), a.end(), uint16_t{0x7FC0});  // NaN: a read of the scratch shows
    matmul_forward(mp, out.data(), x.data(), w, nullptr, rows);
    EXPECT_TRUE(kept.written);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits[i], f32_to_bf16(x[i])) << i;
    EXPECT_EQ(out, expected);
    // Written: read as it is, not rounded from x again.
    std::fill(x.begin(), x.end(), 0.0f);
    matmul_forward(mp, again.data(), x.data(), w, nullptr, rows);
    EXPECT_EQ(again, expected);
    // Another input goes through the scratch.
    matmul_forward(mp, again.data(), other.data(), w, nullptr, rows);
    EXPECT_NE(again, expected);
    EXPECT_EQ(a[0], f32_to_bf16(other[0]));
  }
  EXPECT_TRUE(mp.kept.empty()) << "the scope restores the matmuls' kept operands";
}

// Catches: memory held beyond the model in low precision, and packing that does not
// halve what the blocks keep.
TEST(Precision, LedgerEqualsTheMemoryModelAndBlocksKeepHalf) {
  MemoryLedger& ledger = MemoryLedger::instance();
  const int B = 3, T = 8, chunk = 4;
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    ModelConfig c = tiny(arch);
    const auto in = tokens(B * T, c.vocab_size, 3);
    for (const ActivationCheckpointing& policy :
         {ActivationCheckpointing{}, {CheckpointMode::full, 1}, {CheckpointMode::selective, 1}}) {
      const size_t acts = ledger.current(MemTag::activations), params = ledger.current(MemTag::params);
      {
        Transformer model(c, 1, chunk);
        model.set_precision({DType::bf16, false, {}});
        model.set_activation_checkpointing(policy);
        model.store().zero_grads();
        model.forward_backward(in.data(), in.data(), B, T, 1.0f);
        EXPECT_EQ(ledger.current(MemTag::activations) - acts,
                  static_cast<size_t>(
                      Transformer::predict_activation_bytes(c, B, T, chunk, {}, policy, {}, DType::bf16)))
            << arch_name(arch) << ", " << checkpoint_mode_name(policy.mode);
        // Master values and their bf16 copy: 6 bytes per parameter.
        EXPECT_EQ(ledger.current(MemTag::params) - params, static_cast<size_t>(6 * model.store().numel()));
      }
      EXPECT_EQ(ledger.current(MemTag::activations), acts);
    }
    // What the blocks keep, beyond the stream and workspace: the context of a deep model
    // (the fp32 stream, statistics and x_mid aside) takes half the fp32 bytes, less the
    // attention probabilities, which the low-precision (flash-style) attention keeps none of.
    c.n_layer = 12;
    const int64_t f32 = context_floats(c, {}, B, T), b16 = context_floats(c, {}, B, T, {}, {}, DType::bf16);
    const int64_t probabilities = c.n_layer * int64_t{B} * c.n_head * T * T;
    const int64_t fp32_kept = (c.n_layer + 1) * int64_t{B} * T * c.d_model +  // the stream
                              c.n_layer * (block_local_row_floats(c, {}, B, T) + int64_t{B} * c.n_head * T) +
                              (c.qk_norm ? c.n_layer * int64_t{B} * T * (c.n_head + c.kv_heads()) : 0) +
                              (int64_t{B} * T * (c.d_model + 3));  // the head's
    EXPECT_EQ(2 * (b16 - fp32_kept), f32 - fp32_kept - probabilities) << arch_name(arch);
  }
}

// fp8 (model/fp8_linear.h): e4m3(x * s) / s in double, s a power of two.
double fp8_grid(DType format, float x, float scale) {
  const float q = format == DType::e4m3 ? e4m3_to_f32(f32_to_e4m3(x * scale)) : e5m2_to_f32(f32_to_e5m2(x * scale));
  return static_cast<double>(q) / scale;
}

// Catches: an fp8 matmul that rounds to the wrong grid (another format, a scale not
// applied or applied twice) or accumulates below fp32, against a double-precision
// product of the same rounded operands.
TEST(Fp8, QuantisedMatmulEqualsADoubleReferenceOfTheRoundedInputs) {
  ModelConfig c = tiny(Arch::gpt2);
  c.d_model = 32, c.d_ff = 64, c.n_head = 2, c.n_kv_head = 2;
  Transformer model(c, 5, 4);
  model.set_precision({DType::bf16, /*fp8=*/true, {}});
  Fp8Linears& fp8 = *model.fp8();
  EXPECT_EQ(fp8.count(), 3 * 6);  // q, k, v, o, fc, proj of 3 blocks
  const Parameter& w = model.store().get("blocks.1.mlp.fc.weight");  // [64, 32]
  const int f = fp8.find(w), rows = 9, IC = 32, OC = 64;
  ASSERT_GE(f, 0);
  EXPECT_EQ(fp8.find(model.store().get("wte.weight")), -1) << "the output layer stays bf16";
  // Scales from one recorded step: amax 3 -> 448 / 3 = 149.3 -> 128 (e4m3), amax 0.5 ->
  // 57344 / 0.5 -> 65536 (e5m2).
  fp8.begin_step();
  fp8.step_amax()[3 * f + Fp8Linears::input] = 3.0f;
  fp8.step_amax()[3 * f + Fp8Linears::weight] = 1.0f;
  fp8.step_amax()[3 * f + Fp8Linears::output_grad] = 0.5f;
  fp8.finish_step();
  EXPECT_EQ(fp8.scale(f, Fp8Linears::input), 128.0f);
  EXPECT_EQ(fp8.scale(f, Fp8Linears::weight), 256.0f);  // 448 -> 256
  EXPECT_EQ(fp8.scale(f, Fp8Linears::output_grad), 65536.0f);  // 114688 -> 65536
  std::vector<float> x(rows * IC), out(rows * OC);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 2.5f * std::sin(0.37f * static_cast<float>(i));
  std::vector<uint16_t> a(rows * std::max(IC, OC)), b(a.size());
  MatmulPrecision mp{.dtype = DType::bf16,
                     .a = a.data(),
                     .b = b.data(),
                     .capacity = static_cast<int64_t>(a.size()),
                     .fp8 = &fp8,
                     .kept = {}};
  fp8.begin_step();
  matmul_forward(mp, out.data(), x.data(), w, nullptr, rows);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < OC; ++o) {
      double ref = 0, magnitude = 0;
      for (int i = 0; i < IC; ++i) {
        const double p = fp8_grid(DType::e4m3, x[r * IC + i], 128.0f) * fp8_grid(DType::e4m3, w.data()[o * IC + i], 256.0f);
        ref += p, magnitude += std::fabs(p);
      }
      EXPECT_NEAR(out[r * OC + o], ref, 1e-6 * magnitude) << r << ", " << o;
    }
  }
  // Backward: the output gradient on the e5m2 grid.
  std::vector<float> dout(rows * OC), dinp(rows * IC, 0.0f);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = 0.3f * std::cos(0.11f * static_cast<float>(i));
  matmul_backward(mp, dinp.data(), /*weight_grad=*/false, nullptr, dout.data(), nullptr, w, rows);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < IC; ++i) {
      double ref = 0, magnitude = 0;
      for (int o = 0; o < OC; ++o) {
        const double p =
            fp8_grid(DType::e5m2, dout[r * OC + o], 65536.0f) * fp8_grid(DType::e4m3, w.data()[o * IC + i], 256.0f);
        ref += p, magnitude += std::fabs(p);
      }
      EXPECT_NEAR(dinp[r * IC + i], ref, 1e-6 * magnitude) << r << ", " << i;
    }
  }
  // The step's amaxes were noted: the input's, the weight's and the gradient's.
  float x_amax = 0;
  for (float v : x) x_amax = std::max(x_amax, std::fabs(v));
  EXPECT_EQ(fp8.step_amax()[3 * f + Fp8Linears::input], x_amax);
  EXPECT_GT(fp8.step_amax()[3 * f + Fp8Linears::output_grad], 0.29f);
}

// Catches: fp8 without bf16 compute accepted (its products need the bf16 GEMM).
TEST(Fp8, NeedsBf16Compute) {
  Transformer model(tiny(Arch::llama), 1, 4);
  try {
    model.set_precision({DType::f16, true, {}});
    ADD_FAILURE() << "fp8 with fp16 compute was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs precision.compute = \"bf16\", not \"fp16\""), std::string::npos)
        << e.what();
  }
}

// Catches: fp8 accepted for an MoE model, whose routed experts have no per-expert scales.
TEST(Fp8, RefusedForMixtureOfExperts) {
  Transformer model(tiny_moe(Arch::llama), 1, 4);
  testing::expect_error([&] { model.set_precision({DType::bf16, true, {}}); },
                        {"model.n_experts = 4 (mixture of experts) with precision.fp8 = true is not supported"});
}

}  // namespace
}  // namespace ndt
