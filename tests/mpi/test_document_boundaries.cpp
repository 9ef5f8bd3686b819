// data.document_boundaries on every layout (docs/data.md): the first step's loss and
// gradient norm equal those of feeding each document of its batch alone to a one-rank
// model without boundaries (the mean of the documents' token losses, the norm of their
// summed gradients), and six steps equal the one-rank run with boundaries (losses,
// gradient norms, final parameters), under tp = 2 with sequence parallel, cp = 2 ring
// attention and Ulysses (zigzag chunks, whose runs are not contiguous) and pp = 2
// (1F1B), for GPT-2 (learned positions) and Llama (RoPE, grouped K/V heads, QK-norm).
// On 4 ranks the layouts add dp = 2.
#include "../common/one_rank_mesh.h"
#include "../common/temp_dir.h"
#include "core/rng.h"
#include "data/shard.h"
#include "mpi_env.h"
#include "parity.h"
#include "train/training_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ndt {
namespace {

constexpr int kSeparator = 255;

// Documents of 1 to 40 tokens of [0, 200), each after the separator, as `prepare` writes
// them: rows of 48 tokens hold one to a dozen documents and start anywhere in one.
std::vector<uint16_t> documents_text(int64_t n) { return testing::separated_documents(n, kSeparator, 40); }

RunConfig documents_run(const std::string& train, bool llama) {
  RunConfig c = testing::tiny_run(train, 4, 0);
  if (llama) testing::use_llama(c);
  c.model.max_seq_len = 48;
  c.seq_len = 48;
  c.steps = 6;
  c.grad_clip = 0.0f;  // off: the norms compare the raw gradients
  c.document_boundaries = true;
  c.document_separator = kSeparator;
  // Llama's attention at the default init is near uniform, so its first loss hardly
  // depends on what a token sees (1.7e-5 apart with and without boundaries): at 0.2 it
  // does. (GPT-2 stays at the default: its key bias's gradient is 0 in exact arithmetic,
  // and at that scale AdamW would turn the rounding there into lr-sized steps.)
  if (llama) c.model.init_std = 0.2f;
  return c;
}

// Step 1 from the documents alone: the mean of every token's loss and the norm of the
// summed gradients, on one rank, every document of the first batch a row of its own.
testing::FirstStep documents_alone(const RunConfig& config) {
  const int B = config.batch_size, T = config.seq_len;
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size());
  TrainingData(config).train_rows(0, 0, B, inputs.data(), targets.data());
  Transformer model(config.model, config.seed);  // no boundaries: each document is a whole row
  model.store().zero_grads();
  double loss_sum = 0;
  for (int b = 0; b < B; ++b) {
    int begin = 0;
    for (int t = 1; t <= T; ++t) {
      if (t < T && inputs[size_t(b) * T + t] != kSeparator) continue;
      const size_t at = size_t(b) * T + begin;
      loss_sum += (t - begin) * model.forward_backward(inputs.data() + at, targets.data() + at, 1, t - begin,
                                                       1.0f / (B * T));
      begin = t;
    }
  }
  return {loss_sum / (B * T), testing::gradient_norm(model.store())};
}

struct Layout {
  const char* name;
  int tp = 1, cp = 1, pp = 1;
  CpMode mode = CpMode::ring;
  int cp_ulysses = 1;
};

RunConfig on(const RunConfig& base, const Layout& l) {
  RunConfig c = base;
  c.mesh.tp = l.tp, c.mesh.cp = l.cp, c.mesh.pp = l.pp, c.mesh.cp_ulysses = l.cp_ulysses;
  c.sequence_parallel = l.tp > 1;
  c.cp_mode = l.mode;
  if (l.pp > 1) c.micro_batch_size = 1;
  return c;
}

class DocumentBoundariesLayouts : public ::testing::TestWithParam<testing::Family> {};

// Catches: a layout that lets a token see another document (a ring step or a Ulysses
// all-to-all ignoring the starts, starts taken at local instead of sequence positions on
// zigzag runs), positions not restarting on some rank, a pipeline stage or tp rank
// preparing its micro-batch without the separator.
TEST_P(DocumentBoundariesLayouts, EqualDocumentsAloneAndOneRank) {
  Communicator& world = testing::world();
  testing::TempDir dir;
  write_shard(dir.file("train.bin"), documents_text(20000));
  const RunConfig base = documents_run(dir.file("train.bin"), GetParam().llama);
  const testing::FirstStep alone = documents_alone(base);
  const testing::TrainedRun reference = testing::train(base, testing::one_rank_mesh());
  std::vector<Layout> layouts = {Layout{"tp=2", 2}, Layout{"cp=2 ring", 1, 2},
                                 Layout{"cp=2 ulysses", 1, 2, 1, CpMode::ulysses}, Layout{"pp=2", 1, 1, 2}};
  // USP: each rank's document starts are its ring position's, at the gathered rows.
  if (world.size() % 4 == 0) layouts.push_back(Layout{"cp=2x2 usp", 1, 4, 1, CpMode::usp, 2});
  for (const Layout& l : layouts) {
    const RunConfig config = on(base, l);
    DeviceMesh mesh(world, config.resolve_mesh(world.size()));
    const testing::TrainedRun run = testing::train(config, mesh);
    EXPECT_NEAR(run.losses[0], alone.loss, 1e-5 * alone.loss) << l.name << ": step 1 against the documents alone";
    EXPECT_NEAR(run.grad_norms[0], alone.grad_norm, 1e-5 * alone.grad_norm)
        << l.name << ": step 1 against the documents alone";
    testing::expect_same_run(reference, run, l.name);
  }
  // Without the boundaries the documents of a row meet, and step 1 moves by 20 times the
  // tolerance and more: the comparisons above can fail.
  RunConfig off = base;
  off.document_boundaries = false;
  const testing::TrainedRun mixed = testing::train(off, testing::one_rank_mesh());
  EXPECT_GT(std::fabs(mixed.losses[0] - alone.loss), 2e-4 * alone.loss) << "loss " << alone.loss;
  EXPECT_GT(std::fabs(mixed.grad_norms[0] - alone.grad_norm), 2e-4 * alone.grad_norm) << "norm " << alone.grad_norm;
}

INSTANTIATE_TEST_SUITE_P(Families, DocumentBoundariesLayouts,
                         ::testing::Values(testing::Family{"gpt2", false}, testing::Family{"llama", true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ndt
