// Seq1F1B as data (parallel/pipeline/seq1f1b.h): valid on every shape, its exact order,
// shape errors naming the settings, the validator refusing sequence chunks out of order
// or interleaved with another micro-batch's backward, and the simulator giving the
// bubble (p-1)/(k m + p - 1) and a peak of pp - r + k - 1 units of 1 / k.
#include "../common/errors.h"
#include "parallel/pipeline/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using Kind = PipelineActionKind;
using Lists = std::vector<std::vector<PipelineAction>>;

PipelineAction F(int mb, int seq, int chunk) { return {Kind::forward, mb, chunk, -1, seq}; }
PipelineAction B(int mb, int seq, int chunk) { return {Kind::backward, mb, chunk, -1, seq}; }

std::vector<PipelineAction> compute_only(const std::vector<PipelineAction>& actions) {
  std::vector<PipelineAction> out;
  std::copy_if(actions.begin(), actions.end(), std::back_inserter(out),
               [](const PipelineAction& a) { return !is_communication(a.kind); });
  return out;
}

// Catches: a generator whose lists miss or repeat a unit, break either order, or
// deadlock, for pp 1-4, m 1-12, k 2-4.
TEST(Seq1F1BSchedule, ValidOnEveryShape) {
  for (int pp = 1; pp <= 4; ++pp) {
    for (int m = 1; m <= 12; ++m) {
      for (int k = 2; k <= 4; ++k) {
        SCOPED_TRACE(fmt::format("pp {} m {} k {}", pp, m, k));
        EXPECT_NO_THROW(check_pipeline_schedule(PipelineSchedule::seq1f1b, {pp, 1, m, k}));
      }
    }
  }
}

// Catches: a warm-up too short for the last rank (it needs every sequence chunk of
// micro-batch 0 before the backward of the last) or backward in ascending chunk order.
// pp = 2, m = 2, k = 2, written out.
TEST(Seq1F1BSchedule, OrderIsOneFOneBOverUnitsWithChunksBackwardLastFirst) {
  const PipelineShape shape{2, 1, 2, 2};
  EXPECT_EQ(compute_only(pipeline_actions(PipelineSchedule::seq1f1b, shape, 0)),
            (std::vector<PipelineAction>{F(0, 0, 0), F(0, 1, 0), F(1, 0, 0), B(0, 1, 0), F(1, 1, 0), B(0, 0, 0),
                                         B(1, 1, 0), B(1, 0, 0)}));
  EXPECT_EQ(compute_only(pipeline_actions(PipelineSchedule::seq1f1b, shape, 1)),
            (std::vector<PipelineAction>{F(0, 0, 1), F(0, 1, 1), B(0, 1, 1), F(1, 0, 1), B(0, 0, 1), F(1, 1, 1),
                                         B(1, 1, 1), B(1, 0, 1)}));
  // Each unit's boundary tensors travel with its sequence chunk and ids of their own.
  const std::vector<PipelineAction> rank0 = pipeline_actions(PipelineSchedule::seq1f1b, shape, 0);
  EXPECT_EQ(rank0[1], (PipelineAction{Kind::send_activation, 0, 0, 1, 0}));
  EXPECT_EQ(rank0[3], (PipelineAction{Kind::send_activation, 0, 0, 1, 1}));
  EXPECT_NE(pipeline_message_id(rank0[1], shape), pipeline_message_id(rank0[3], shape));
  EXPECT_EQ(describe(rank0[3]), "SendActivation(mb 0 seq 1, chunk 0, to rank 1)");
}

// Catches: sequence chunks accepted on a schedule that cannot run them, or seq1f1b
// without them or with virtual stages, without the values in the message.
TEST(Seq1F1BSchedule, ShapeErrorsNameTheSettings) {
  expect_error([] { check_pipeline_shape(PipelineSchedule::seq1f1b, {2, 1, 4, 1}); },
               {"\"seq1f1b\"", "parallel.pp_seq_chunks >= 2", "got 1"});
  expect_error([] { check_pipeline_shape(PipelineSchedule::one_f_one_b, {2, 1, 4, 2}); },
               {"parallel.pp_seq_chunks = 2", "\"seq1f1b\"", "\"1f1b\""});
  expect_error([] { check_pipeline_shape(PipelineSchedule::seq1f1b, {2, 2, 4, 2}); },
               {"\"seq1f1b\"", "parallel.pp_virtual_stages = 2"});
  expect_error([] { check_pipeline_shape(PipelineSchedule::seq1f1b, {2, 1, 4, 0}); }, {"parallel.pp_seq_chunks = 0"});
}

// Catches: a validator that lets a later sequence chunk run forward before an earlier
// one (its attention would read keys not computed yet), an earlier one backward before
// a later one (its key gradients would miss the later queries' share), another
// micro-batch's backward between a micro-batch's chunks (the rank's sums would be
// overwritten), or a sequence chunk out of range.
TEST(Seq1F1BValidation, ChunksOutOfOrderOrInterleavedAreRefused) {
  const PipelineShape one_rank{1, 1, 2, 2};
  Lists lists = pipeline_actions_of_all_ranks(PipelineSchedule::seq1f1b, one_rank);
  ASSERT_EQ(lists[0], (std::vector<PipelineAction>{F(0, 0, 0), F(0, 1, 0), B(0, 1, 0), F(1, 0, 0), B(0, 0, 0),
                                                   F(1, 1, 0), B(1, 1, 0), B(1, 0, 0)}));
  lists[0] = {F(0, 1, 0), F(0, 0, 0), B(0, 1, 0), B(0, 0, 0), F(1, 0, 0), F(1, 1, 0), B(1, 1, 0), B(1, 0, 0)};
  expect_error([&] { check_pipeline_actions(lists, one_rank); },
               {"rank 0 action 0: Forward(mb 0 seq 1, chunk 0)", "sequence chunk 0", "ascending"});
  lists[0] = {F(0, 0, 0), F(0, 1, 0), B(0, 0, 0), B(0, 1, 0), F(1, 0, 0), F(1, 1, 0), B(1, 1, 0), B(1, 0, 0)};
  expect_error([&] { check_pipeline_actions(lists, one_rank); },
               {"rank 0 action 2: Backward(mb 0, chunk 0)", "sequence chunk 1", "descending"});
  lists[0] = {F(0, 0, 0), F(0, 1, 0), F(1, 0, 0), F(1, 1, 0), B(0, 1, 0), B(1, 1, 0), B(1, 0, 0), B(0, 0, 0)};
  expect_error([&] { check_pipeline_actions(lists, one_rank); },
               {"rank 0 action 5: Backward(mb 1 seq 1, chunk 0)", "micro-batch 0's sequence chunks",
                "part-way through their backward of chunk 0"});
  lists[0] = {F(0, 0, 0), F(0, 2, 0)};
  expect_error([&] { check_pipeline_actions(lists, one_rank); },
               {"Forward(mb 0 seq 2, chunk 0)", "sequence chunk outside [0, 2)"});
  lists = pipeline_actions_of_all_ranks(PipelineSchedule::seq1f1b, one_rank);
  lists[0].pop_back();
  expect_error([&] { check_pipeline_actions(lists, one_rank); },
               {"micro-batch 1 sequence chunk 0 never runs Backward on chunk 0"});
}

// Catches: a simulator or generator off the paper's bubble, k m units of 1 / k of a
// micro-batch's cost filling the pipeline: (p-1)/(k m + p - 1) exactly at uniform
// costs, below 1f1b's; and a peak of units other than pp - r + k - 1 (each 1 / k of a
// micro-batch, against 1f1b's pp - r micro-batches).
TEST(Seq1F1BSimulator, BubbleAndPeakUnitsAreTheFormulas) {
  for (int p : {2, 3, 4}) {
    for (int k : {2, 4}) {
      for (int m : {p, 2 * p, 12}) {
        SCOPED_TRACE(fmt::format("p {} k {} m {}", p, k, m));
        const PipelineShape shape{p, 1, m, k};
        const PipelineSimulation s = simulate_pipeline(PipelineSchedule::seq1f1b, shape);
        const double theory = double(p - 1) / (k * m + p - 1);
        for (double bubble : s.bubble) EXPECT_NEAR(bubble, theory, 1e-12);
        EXPECT_NEAR(pipeline_bubble_theory(PipelineSchedule::seq1f1b, shape, {}).fraction, theory, 1e-12);
        EXPECT_LT(s.mean_bubble, simulate_pipeline(PipelineSchedule::one_f_one_b, {p, 1, m}).mean_bubble);
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(s.peak_live_activations[static_cast<size_t>(r)], p - r + k - 1) << "rank " << r;
          EXPECT_EQ(s.peak_live_contexts[static_cast<size_t>(r)], p - r + k - 1) << "rank " << r;
        }
      }
    }
  }
  const std::string text = render_pipeline_text(simulate_pipeline(PipelineSchedule::seq1f1b, {2, 1, 2, 2}));
  EXPECT_NE(text.find("|F0.0F0.1F1.0"), std::string::npos) << text;
  EXPECT_NE(text.find(".the sequence chunk"), std::string::npos) << text;
}

}  // namespace
}  // namespace ndt
