// The output z-loss under tensor parallelism: the vocab-parallel cross-entropy's z terms
// and gradient against the fused kernel on the whole vocabulary, and one forward_backward
// of a model on tp = world ranks (with and without sequence parallel, GPT-2 and Llama
// shapes) against a one-rank model built the same way: loss, z-loss sum and the gathered
// parameter gradients.
#include "comm/device_mesh.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/tp_layers.h"
#include "model/transformer.h"
#include "mpi_env.h"
#include "parallel/parallelize.h"
#include "parallel/tensor/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

constexpr float kZLoss = 0.05f;

std::vector<int32_t> token_ids(int n, int vocab, uint64_t stream) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(philox(11, stream, i)[0] % vocab);
  return t;
}

// Catches: a z-loss computed from this rank's vocabulary slice (its local max and exp sum)
// instead of the reduced log-sum-exp, or a z gradient missing on the slices that do not
// own the target.
TEST(ZLossTensorParallel, VocabParallelCrossEntropyMatchesFused) {
  Communicator& world = testing::world();
  const int tp = world.size(), me = world.rank();
  const int rows = 6, local_vocab = 11, V = local_vocab * tp;
  const int64_t vocab_begin = int64_t{me} * local_vocab;
  std::vector<float> full(static_cast<size_t>(rows) * V);
  fill_normal(full.data(), static_cast<int64_t>(full.size()), 0, 0.0f, 3.0f, 77, 1);
  const std::vector<int32_t> targets = token_ids(rows, V, 2);
  MegatronRegions regions(TensorParallel{&world, false});
  for (float grad_scale : {0.0f, 0.25f}) {
    std::vector<float> reference = full, reference_losses(rows), reference_z(rows);
    kernels::softmax_cross_entropy(reference.data(), reference_losses.data(), targets.data(), rows, V, grad_scale,
                                   kZLoss, reference_z.data());
    std::vector<float> local(static_cast<size_t>(rows) * local_vocab), losses(rows), z(rows, -1.0f), work(3 * rows);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(full.data() + int64_t{r} * V + vocab_begin, local_vocab, local.data() + int64_t{r} * local_vocab);
    }
    vocab_parallel_cross_entropy(regions, local.data(), losses.data(), targets.data(), rows, local_vocab, vocab_begin,
                                 grad_scale, work.data(), kZLoss, z.data());
    for (int r = 0; r < rows; ++r) {
      EXPECT_NEAR(losses[r], reference_losses[r], 1e-5 * std::max(1.0f, std::fabs(reference_losses[r])))
          << "row " << r << ", rank " << me;
      EXPECT_NEAR(z[r], reference_z[r], 1e-5 * std::fabs(reference_z[r])) << "row " << r << ", rank " << me;
      for (int j = 0; j < local_vocab; ++j) {
        const float want = grad_scale != 0.0f ? reference[int64_t{r} * V + vocab_begin + j]
                                              : full[int64_t{r} * V + vocab_begin + j];
        const float got = local[int64_t{r} * local_vocab + j];
        ASSERT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-8) << "row " << r << ", logit " << vocab_begin + j
                                                               << ", grad_scale " << grad_scale << ", rank " << me;
      }
    }
  }
}

ModelConfig small_model(bool llama) {
  ModelConfig c = ModelConfig::preset("gpt2-tiny");  // vocabulary 256
  c.n_layer = 2, c.d_model = 32, c.d_ff = 128, c.n_head = 4, c.max_seq_len = 16;
  c.init_std = 0.1f;  // logits spread enough that each token's lse differs
  if (llama) {
    c.arch = Arch::llama;
    c.tied_embeddings = false;
    c.n_head = 8, c.n_kv_head = 4, c.d_ff = 96;  // divisible by 4 tp ranks
    c.qk_norm = true;
  }
  return c;
}

struct StepResult {
  double loss_sum = 0, z_loss_sum = 0;
  std::vector<float> grads;  // logical (whole) gradients in store order
};

// One forward_backward with z-loss on the given coefficient; mesh null: one rank.
StepResult one_step(const ModelConfig& c, float z_loss, DeviceMesh* mesh, bool sequence_parallel) {
  const int B = 2, T = 16, chunk = 5;  // row chunks of the loss cross the sequences
  const auto in = token_ids(B * T, c.vocab_size, 3), target = token_ids(B * T, c.vocab_size, 4);
  const float scale = 1.0f / (B * T);
  StepResult result;
  MicroBatchContext ctx;
  if (mesh == nullptr) {
    Transformer model(c, 17, chunk);
    model.set_z_loss(z_loss);
    model.store().zero_grads();
    model.prepare(ctx, in.data(), target.data(), B, T, scale, /*forward_only=*/false);
    run_forward_backward(model, ctx, nullptr);
    const float* g = model.store().grads().data<float>();
    result.grads.assign(g, g + model.store().numel());
  } else {
    Transformer model(c, 17, chunk, /*materialize_parameters=*/false);
    ParallelOptions options;
    options.sequence_parallel = sequence_parallel;
    auto sync = parallelize(model, *mesh, options);
    model.set_z_loss(z_loss);
    sync->zero_grads();
    sync->begin_backward(true);
    model.prepare(ctx, in.data(), target.data(), B, T, scale, /*forward_only=*/false);
    run_forward_backward(model, ctx, sync.get());
    sync->finish_backward();
    result.grads = gather_tensor_parallel(model.store(), model.store().grads().data<float>(),
                                          TensorParallel{&mesh->axis(Axis::tp), sequence_parallel});
  }
  result.loss_sum = ctx.loss_sum, result.z_loss_sum = ctx.z_loss_sum;
  return result;
}

double norm(const float* a, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * a[i];
  return std::sqrt(s);
}

// ||a - b|| / max(||b||, floor).
double relative_distance(const float* a, const float* b, int64_t n, double floor = 0) {
  double diff = 0;
  for (int64_t i = 0; i < n; ++i) diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(diff) / std::max(norm(b, n), floor);
}

// Catches: a z-loss or z gradient on tp ranks that differs from one rank: the local
// instead of the reduced lse, the z sum counted once per rank, the z term missing from
// the gradient of the vocabulary slices or of the sequence-parallel rows.
TEST(ZLossTensorParallel, ForwardBackwardMatchesOneRank) {
  Communicator& world = testing::world();
  const int tp = world.size();
  for (bool llama : {false, true}) {
    const ModelConfig c = small_model(llama);
    const StepResult reference = one_step(c, kZLoss, nullptr, false);
    // The z term is visible in the gradients (so the comparison below can see it wrong).
    const StepResult without = one_step(c, 0.0f, nullptr, false);
    ASSERT_EQ(without.loss_sum, reference.loss_sum);
    ASSERT_GT(relative_distance(reference.grads.data(), without.grads.data(), int64_t(reference.grads.size())), 1e-2);
    ASSERT_GT(reference.z_loss_sum, 0.0);
    for (bool sp : {false, true}) {
      const std::string what = std::string(llama ? "llama" : "gpt2") + (sp ? " sp" : "") + " tp=" + std::to_string(tp) +
                               ", rank " + std::to_string(world.rank());
      DeviceMesh mesh(world, MeshShape{1, 1, 1, 1, tp});
      const StepResult got = one_step(c, kZLoss, &mesh, sp);
      EXPECT_NEAR(got.loss_sum, reference.loss_sum, 1e-5 * std::fabs(reference.loss_sum)) << what;
      EXPECT_NEAR(got.z_loss_sum, reference.z_loss_sum, 1e-5 * std::fabs(reference.z_loss_sum)) << what;
      ASSERT_EQ(got.grads.size(), reference.grads.size()) << what;
      // The whole gradient, ||g - g_ref|| / ||g_ref||, and each parameter tensor's, relative
      // to its own norm or, for a gradient that is zero but for rounding (the key bias:
      // softmax ignores a constant added to a row of scores), 1e-3 of the whole norm.
      const int64_t total = int64_t(reference.grads.size());
      EXPECT_LT(relative_distance(got.grads.data(), reference.grads.data(), total), 1e-5) << what;
      const double floor = 1e-3 * norm(reference.grads.data(), total);
      Transformer layout(c, 17, 5, /*materialize_parameters=*/false);
      int64_t offset = 0;
      for (const Parameter& p : layout.store().params()) {
        const int64_t n = shape_numel(p.spec.logical_shape);
        EXPECT_LT(relative_distance(got.grads.data() + offset, reference.grads.data() + offset, n, floor), 1e-5)
            << what << ", gradient of " << p.name() << " (norm " << norm(reference.grads.data() + offset, n)
            << ", of all " << norm(reference.grads.data(), total) << ")";
        offset += n;
      }
      EXPECT_EQ(offset, int64_t(reference.grads.size())) << what;
    }
  }
}

}  // namespace
}  // namespace ndt
