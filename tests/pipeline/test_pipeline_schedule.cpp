// Pipeline schedules as data (parallel/pipeline/schedule.h): names and shape errors,
// every generated list valid over a grid of shapes, exact lists where the order is the
// schedule's definition, and the validator failing on each kind of broken list.
#include "../common/errors.h"
#include "parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using Kind = PipelineActionKind;
using Lists = std::vector<std::vector<PipelineAction>>;

constexpr PipelineSchedule kAll[] = {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                     PipelineSchedule::interleaved_1f1b, PipelineSchedule::zb_h1};

PipelineAction F(int mb, int chunk) { return {Kind::forward, mb, chunk, -1}; }
PipelineAction B(int mb, int chunk) { return {Kind::backward, mb, chunk, -1}; }
PipelineAction SendA(int mb, int chunk, int peer) { return {Kind::send_activation, mb, chunk, peer}; }
PipelineAction RecvA(int mb, int chunk, int peer) { return {Kind::recv_activation, mb, chunk, peer}; }
PipelineAction SendG(int mb, int chunk, int peer) { return {Kind::send_gradient, mb, chunk, peer}; }
PipelineAction RecvG(int mb, int chunk, int peer) { return {Kind::recv_gradient, mb, chunk, peer}; }

std::vector<PipelineAction> compute_only(const std::vector<PipelineAction>& actions) {
  std::vector<PipelineAction> out;
  for (const PipelineAction& a : actions) {
    if (!is_communication(a.kind)) out.push_back(a);
  }
  return out;
}

size_t index_of(const std::vector<PipelineAction>& actions, const PipelineAction& a) {
  const auto it = std::find(actions.begin(), actions.end(), a);
  EXPECT_NE(it, actions.end()) << describe(a);
  return static_cast<size_t>(it - actions.begin());
}

// Catches: a schedule missing from the name table, or an unknown name accepted or
// reported without the setting and the choices.
TEST(PipelineSchedule, NamesRoundTripAndUnknownNamesAreRefused) {
  for (PipelineSchedule s : kAll) EXPECT_EQ(pipeline_schedule_from_name(pipeline_schedule_name(s)), s);
  EXPECT_EQ(pipeline_schedule_names(),
            (std::vector<std::string>{"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "seq1f1b"}));
  expect_error([] { pipeline_schedule_from_name("1F1B"); },
               {"parallel.pp_schedule", "\"1F1B\"", "gpipe, 1f1b, interleaved_1f1b, zb_h1, seq1f1b"});
}

// Catches: shapes a schedule cannot run accepted (interleaving with m not a multiple
// of pp, virtual stages on a one-stage schedule) or refused without the values.
TEST(PipelineSchedule, ShapeErrorsNameTheValues) {
  expect_error([] { check_pipeline_shape(PipelineSchedule::interleaved_1f1b, {4, 2, 6}); },
               {"interleaved_1f1b", "micro-batches (6)", "multiple of parallel.pp (4)"});
  expect_error([] { check_pipeline_shape(PipelineSchedule::interleaved_1f1b, {4, 1, 8}); },
               {"parallel.pp_virtual_stages >= 2", "got 1"});
  expect_error([] { check_pipeline_shape(PipelineSchedule::one_f_one_b, {4, 2, 8}); },
               {"\"1f1b\"", "parallel.pp_virtual_stages = 2", "interleaved_1f1b"});
  expect_error([] { check_pipeline_shape(PipelineSchedule::gpipe, {0, 1, 8}); }, {"parallel.pp = 0"});
  expect_error([] { check_pipeline_shape(PipelineSchedule::gpipe, {2, 1, 0}); }, {"micro-batches", "(0)"});
  expect_error([] { pipeline_actions(PipelineSchedule::gpipe, {2, 1, 4}, 2); }, {"rank 2", "parallel.pp = 2"});
}

// Catches: any generated list that misses or repeats a pass, breaks the chunk order,
// has a send without its receive, or deadlocks, on any shape (m below, equal to and
// above pp, pp = 1, several virtual stages).
TEST(PipelineSchedule, EveryScheduleIsValidOnEveryShape) {
  int checked = 0;
  for (PipelineSchedule s : kAll) {
    for (int pp = 1; pp <= 5; ++pp) {
      for (int m = 1; m <= 12; ++m) {
        for (int v = 1; v <= 3; ++v) {
          const PipelineShape shape{pp, v, m};
          const bool interleaved = s == PipelineSchedule::interleaved_1f1b;
          if (interleaved ? (v < 2 || m % pp != 0) : v != 1) continue;
          SCOPED_TRACE(fmt::format("{} pp {} v {} m {}", pipeline_schedule_name(s), pp, v, m));
          EXPECT_NO_THROW(check_pipeline_schedule(s, shape));
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 150);
}

// Catches: a wrong warm-up length or a send/receive placed anywhere but next to the
// compute it feeds or comes from. The lists of 1f1b for pp = 2, m = 3, written out.
TEST(PipelineSchedule, OneFOneBListsAreTheTextbookOnes) {
  const PipelineShape shape{2, 1, 3};
  EXPECT_EQ(pipeline_actions(PipelineSchedule::one_f_one_b, shape, 0),
            (std::vector<PipelineAction>{F(0, 0), SendA(0, 0, 1), F(1, 0), SendA(1, 0, 1), RecvG(0, 0, 1), B(0, 0),
                                         F(2, 0), SendA(2, 0, 1), RecvG(1, 0, 1), B(1, 0), RecvG(2, 0, 1), B(2, 0)}));
  EXPECT_EQ(pipeline_actions(PipelineSchedule::one_f_one_b, shape, 1),
            (std::vector<PipelineAction>{RecvA(0, 1, 0), F(0, 1), B(0, 1), SendG(0, 1, 0), RecvA(1, 1, 0), F(1, 1),
                                         B(1, 1), SendG(1, 1, 0), RecvA(2, 1, 0), F(2, 1), B(2, 1), SendG(2, 1, 0)}));
}

// Catches: GPipe's backward in forward order, or a forward interleaved with backwards.
TEST(PipelineSchedule, GPipeRunsEveryForwardThenBackwardsInReverse) {
  const std::vector<PipelineAction> actions = compute_only(pipeline_actions(PipelineSchedule::gpipe, {3, 1, 4}, 1));
  EXPECT_EQ(actions, (std::vector<PipelineAction>{F(0, 1), F(1, 1), F(2, 1), F(3, 1), B(3, 1), B(2, 1), B(1, 1),
                                                  B(0, 1)}));
}

// Catches: Megatron's interleaved order broken (micro-batches in groups of pp through
// the rank's chunks in turn, backward through the chunks reversed) or a wrong warm-up
// (2 (pp - r - 1) + (v - 1) pp forwards before the first backward).
TEST(PipelineSchedule, InterleavedFollowsMegatronsOrder) {
  const PipelineShape shape{2, 2, 4};
  const std::vector<PipelineAction> rank0 =
      compute_only(pipeline_actions(PipelineSchedule::interleaved_1f1b, shape, 0));
  // Warm-up 2 (2 - 0 - 1) + (2 - 1) 2 = 4, then forward and backward in turn.
  EXPECT_EQ(rank0, (std::vector<PipelineAction>{F(0, 0), F(1, 0), F(0, 2), F(1, 2), F(2, 0), B(0, 2), F(3, 0),
                                                B(1, 2), F(2, 2), B(0, 0), F(3, 2), B(1, 0), B(2, 2), B(3, 2),
                                                B(2, 0), B(3, 0)}));
  const std::vector<PipelineAction> rank1 =
      compute_only(pipeline_actions(PipelineSchedule::interleaved_1f1b, shape, 1));
  const auto first_backward =
      std::find_if(rank1.begin(), rank1.end(), [](auto& a) { return a.kind == Kind::backward; });
  EXPECT_EQ(first_backward - rank1.begin(), 2 + 1);  // warm-up 2, then one forward before it
}

// Catches: zero bubble deferring the wrong number of weight passes (rank r keeps r
// pending, run after its last input pass), splitting rank 0's backward for nothing, or a weight pass of
// a micro-batch before its input pass.
TEST(PipelineSchedule, ZeroBubbleDefersRankManyWeightPasses) {
  const PipelineShape shape{4, 1, 8};
  for (int r = 0; r < shape.pp; ++r) {
    SCOPED_TRACE(r);
    const std::vector<PipelineAction> actions = compute_only(pipeline_actions(PipelineSchedule::zb_h1, shape, r));
    const auto count = [&](Kind kind) {
      return std::count_if(actions.begin(), actions.end(), [&](auto& a) { return a.kind == kind; });
    };
    if (r == 0) {
      EXPECT_EQ(count(Kind::backward), shape.m);
      EXPECT_EQ(count(Kind::backward_input), 0);
      continue;
    }
    EXPECT_EQ(count(Kind::backward), 0);
    EXPECT_EQ(count(Kind::backward_input), shape.m);
    EXPECT_EQ(count(Kind::backward_weight), shape.m);
    const auto trailing =
        std::find_if(actions.rbegin(), actions.rend(), [](auto& a) { return a.kind != Kind::backward_weight; });
    EXPECT_EQ(trailing - actions.rbegin(), r + 1);  // the one due after the last input pass, then r deferred
    // Weight pass of micro-batch mb right after the input pass of mb + r (while any remain).
    for (int mb = 0; mb + r < shape.m; ++mb) {
      EXPECT_EQ(index_of(actions, {Kind::backward_weight, mb, r, -1}),
                index_of(actions, {Kind::backward_input, mb + r, r, -1}) + 1);
    }
  }
}

// Catches: a send or receive between chunks of one rank (pp = 1), or a boundary tensor
// sent twice or not at all: 2 (chunks - 1) m messages per step, each id once.
TEST(PipelineSchedule, MessagesAreExactlyTheBoundaryTensors) {
  for (PipelineSchedule s : kAll) {
    const int v = s == PipelineSchedule::interleaved_1f1b ? 2 : 1;
    for (int pp : {1, 2, 4}) {
      const PipelineShape shape{pp, v, 8};
      SCOPED_TRACE(fmt::format("{} pp {}", pipeline_schedule_name(s), pp));
      std::multiset<int> sent, received;
      for (const auto& rank : pipeline_actions_of_all_ranks(s, shape)) {
        for (const PipelineAction& a : rank) {
          if (!is_communication(a.kind)) continue;
          const bool send = a.kind == Kind::send_activation || a.kind == Kind::send_gradient;
          (send ? sent : received).insert(pipeline_message_id(a, shape));
        }
      }
      const size_t expected = pp == 1 ? 0 : 2 * (shape.chunks() - 1) * shape.m;
      EXPECT_EQ(sent.size(), expected);
      EXPECT_EQ(std::set<int>(sent.begin(), sent.end()).size(), expected);
      EXPECT_EQ(sent, received);
    }
  }
}

// ---- the validator fails on broken lists ----------------------------------------------------

Lists one_f_one_b(const PipelineShape& shape) {
  return pipeline_actions_of_all_ranks(PipelineSchedule::one_f_one_b, shape);
}

// Catches: a deadlock going unnoticed, or reported without which rank waits on what.
TEST(PipelineValidation, DeadlockNamesWhatEachRankWaitsFor) {
  Lists lists = one_f_one_b({2, 1, 2});
  // Rank 0 waits for the first gradient before sending any activation.
  auto& rank0 = lists[0];
  std::rotate(rank0.begin(), rank0.begin() + static_cast<long>(index_of(rank0, RecvG(0, 0, 1))),
              rank0.begin() + static_cast<long>(index_of(rank0, RecvG(0, 0, 1))) + 1);
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); },
               {"deadlock", "rank 0 waits at action 0 on RecvGradient(mb 0, chunk 0, from rank 1)",
                "rank 1 waits at action 0 on RecvActivation(mb 0, chunk 1, from rank 0)"});
}

// Catches: a receive missing (the forward would compute on a tensor not there yet) or
// a send nobody receives.
TEST(PipelineValidation, UnmatchedSendsAndReceivesAreRefused) {
  Lists lists = one_f_one_b({2, 1, 2});
  lists[1].erase(lists[1].begin() + static_cast<long>(index_of(lists[1], RecvA(1, 1, 0))));
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); },
               {"rank 1", "Forward(mb 1, chunk 1)", "before its RecvActivation"});

  lists = one_f_one_b({2, 1, 2});
  lists[1].erase(lists[1].begin() + static_cast<long>(index_of(lists[1], RecvA(1, 1, 0))));
  lists[1].erase(lists[1].begin() + static_cast<long>(index_of(lists[1], F(1, 1))));
  lists[1].erase(lists[1].begin() + static_cast<long>(index_of(lists[1], B(1, 1))));
  lists[1].erase(lists[1].begin() + static_cast<long>(index_of(lists[1], SendG(1, 1, 0))));
  lists[0].erase(lists[0].begin() + static_cast<long>(index_of(lists[0], RecvG(1, 0, 1))));
  lists[0].erase(lists[0].begin() + static_cast<long>(index_of(lists[0], B(1, 0))));
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); },
               {"SendActivation(mb 1, chunk 0, to rank 1)", "no matching receive on rank 1"});

  lists = one_f_one_b({2, 1, 2});
  lists[0].insert(lists[0].begin() + 2, SendA(0, 0, 1));
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); }, {"rank 0 action 2", "already sent"});
}

// Catches: a pass missing or repeated, or passes out of chunk order on one rank.
TEST(PipelineValidation, PassesMissingRepeatedOrOutOfOrderAreRefused) {
  Lists lists = one_f_one_b({2, 1, 2});
  lists[0].erase(lists[0].end() - 1);  // B(1, 0)
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); },
               {"micro-batch 1 never runs Backward on chunk 0 (rank 0)"});

  lists = one_f_one_b({1, 1, 2});
  lists[0].insert(lists[0].begin() + 1, F(0, 0));
  expect_error([&] { check_pipeline_actions(lists, {1, 1, 2}); }, {"Forward(mb 0, chunk 0) runs a second time"});

  // pp = 1 with two chunks on the rank: swap the two forwards of micro-batch 0.
  const PipelineShape two_chunks{1, 2, 1};
  lists = pipeline_actions_of_all_ranks(PipelineSchedule::interleaved_1f1b, two_chunks);
  ASSERT_EQ(lists[0], (std::vector<PipelineAction>{F(0, 0), F(0, 1), B(0, 1), B(0, 0)}));
  lists[0] = {F(0, 1), F(0, 0), B(0, 1), B(0, 0)};
  expect_error([&] { check_pipeline_actions(lists, two_chunks); }, {"Forward(mb 0, chunk 1)", "ascending"});
  lists[0] = {F(0, 0), F(0, 1), B(0, 0), B(0, 1)};
  expect_error([&] { check_pipeline_actions(lists, two_chunks); }, {"Backward(mb 0, chunk 0)", "descending"});
  lists[0] = {F(0, 0), B(0, 1), F(0, 1), B(0, 0)};
  expect_error([&] { check_pipeline_actions(lists, two_chunks); }, {"Backward(mb 0, chunk 1) runs before its Forward"});
}

// Catches: zero bubble's weight pass accepted before its input pass, or a split and a
// fused backward of the same pass both accepted.
TEST(PipelineValidation, WeightPassNeedsItsInputPassFirst) {
  const PipelineShape shape{2, 1, 2};
  Lists lists = pipeline_actions_of_all_ranks(PipelineSchedule::zb_h1, shape);
  const PipelineAction input{Kind::backward_input, 0, 1, -1}, weight{Kind::backward_weight, 0, 1, -1};
  std::swap(lists[1][index_of(lists[1], input)], lists[1][index_of(lists[1], weight)]);
  expect_error([&] { check_pipeline_actions(lists, shape); },
               {"BackwardWeight(mb 0, chunk 1) without a BackwardInput before it"});

  lists = pipeline_actions_of_all_ranks(PipelineSchedule::zb_h1, shape);
  lists[1].insert(lists[1].begin() + static_cast<long>(index_of(lists[1], input)) + 1, B(0, 1));
  expect_error([&] { check_pipeline_actions(lists, shape); }, {"Backward(mb 0, chunk 1)", "already ran"});
}

// Catches: an action on a chunk its rank does not hold, a micro-batch out of range, a
// wrong peer, or a send where both chunks live on one rank.
TEST(PipelineValidation, WrongChunksPeersAndRangesAreRefused) {
  Lists lists = one_f_one_b({2, 1, 2});
  lists[0][0] = F(0, 1);
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); },
               {"rank 0 action 0", "Forward(mb 0, chunk 1)", "chunk c lives on rank c % 2"});

  lists = one_f_one_b({2, 1, 2});
  lists[0][0] = F(2, 0);
  expect_error([&] { check_pipeline_actions(lists, {2, 1, 2}); }, {"micro-batch outside [0, 2)"});

  lists = one_f_one_b({4, 1, 4});
  lists[1][0].peer = 2;  // RecvActivation(0, 1) from rank 0
  expect_error([&] { check_pipeline_actions(lists, {4, 1, 4}); },
               {"RecvActivation(mb 0, chunk 1, from rank 2)", "should name rank 0"});

  lists = pipeline_actions_of_all_ranks(PipelineSchedule::interleaved_1f1b, {1, 2, 1});
  lists[0].insert(lists[0].begin() + 1, SendA(0, 0, 0));
  expect_error([&] { check_pipeline_actions(lists, {1, 2, 1}); }, {"no neighbour chunk on another rank"});

  expect_error([&] { check_pipeline_actions(one_f_one_b({2, 1, 2}), {4, 1, 2}); },
               {"2 action lists for parallel.pp = 4"});
}

}  // namespace
}  // namespace ndt
