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
                                     PipelineSchedule::interleaved_1f1b, PipelineSchedule::zb_h1,
                                     PipelineSchedule::zb_v,  PipelineSchedule::dualpipev};
constexpr PipelineSchedule kV[] = {PipelineSchedule::zb_v, PipelineSchedule::dualpipev};

// The chunks per rank a schedule runs in these tests.
int chunks_per_rank(PipelineSchedule s) {
  return s == PipelineSchedule::interleaved_1f1b || pipeline_placement(s) == PipelinePlacement::v ? 2 : 1;
}

PipelineAction F(int mb, int chunk) { return {Kind::forward, mb, chunk, -1}; }
PipelineAction B(int mb, int chunk) { return {Kind::backward, mb, chunk, -1}; }
PipelineAction I(int mb, int chunk) { return {Kind::backward_input, mb, chunk, -1}; }
PipelineAction W(int mb, int chunk) { return {Kind::backward_weight, mb, chunk, -1}; }
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
            (std::vector<std::string>{"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_v", "dualpipev", "seq1f1b"}));
  expect_error([] { pipeline_schedule_from_name("1F1B"); },
               {"parallel.pp_schedule", "\"1F1B\"", "gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_v, dualpipev, seq1f1b"});
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
  // The V schedules: two chunks per rank, no other count; the V placement.
  for (PipelineSchedule s : kV) {
    for (int v : {1, 3}) {
      expect_error([&] { check_pipeline_shape(s, pipeline_shape(s, 4, v, 8)); },
                   {fmt::format("\"{}\"", pipeline_schedule_name(s)), "parallel.pp_virtual_stages = 2",
                    fmt::format("got {}", v)});
    }
    expect_error([&] { check_pipeline_shape(s, {4, 2, 8}); }, {"the V placement"});
  }
  expect_error([] { check_pipeline_shape(PipelineSchedule::interleaved_1f1b, {4, 2, 8, 1, PipelinePlacement::v}); },
               {"\"interleaved_1f1b\"", "the loop placement"});
}

// Catches: a V placement that is not r and 2 pp - 1 - r, or a loop placement changed by
// it. pp = 3: rank 0 holds chunks 0 and 5 (embedding and head), rank 2 the middle two.
TEST(PipelineSchedule, PlacementsPutChunksOnTheirRanks) {
  const PipelineShape v = pipeline_shape(PipelineSchedule::zb_v, 3, 2, 4);
  EXPECT_EQ(v.chunks_of(0), (std::vector<int>{0, 5}));
  EXPECT_EQ(v.chunks_of(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(v.chunks_of(2), (std::vector<int>{2, 3}));
  for (int c = 0; c < 6; ++c) EXPECT_EQ(v.local_index(c), c < 3 ? 0 : 1);
  const PipelineShape loop = pipeline_shape(PipelineSchedule::interleaved_1f1b, 3, 2, 3);
  EXPECT_EQ(loop.chunks_of(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(loop.chunks_of(2), (std::vector<int>{2, 5}));
  EXPECT_EQ(pipeline_shape(PipelineSchedule::dualpipev, 2, 2, 4).placement, PipelinePlacement::v);
  EXPECT_EQ(pipeline_shape(PipelineSchedule::zb_h1, 2, 1, 4).placement, PipelinePlacement::loop);
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
          const PipelineShape shape = pipeline_shape(s, pp, v, m);
          const bool interleaved = s == PipelineSchedule::interleaved_1f1b;
          if (pipeline_placement(s) == PipelinePlacement::v ? v != 2 : interleaved ? (v < 2 || m % pp != 0) : v != 1) {
            continue;
          }
          SCOPED_TRACE(fmt::format("{} pp {} v {} m {}", pipeline_schedule_name(s), pp, v, m));
          EXPECT_NO_THROW(check_pipeline_schedule(s, shape));
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 250);
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

// Catches: ZB-V's phases off (warm-up 2 (p - r) - 1 first-leg forwards, then r pairs
// of second- and first-leg forwards, p - r times F I W of the second leg, then F I W of
// each leg in turn), or a send between the two middle chunks of rank pp - 1. pp = 2,
// m = 3: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2, written out.
TEST(PipelineSchedule, ZbVFollowsItsPhases) {
  const PipelineShape shape = pipeline_shape(PipelineSchedule::zb_v, 2, 2, 3);
  EXPECT_EQ(compute_only(pipeline_actions(PipelineSchedule::zb_v, shape, 0)),
            (std::vector<PipelineAction>{F(0, 0), F(1, 0), F(2, 0), F(0, 3), I(0, 3), W(0, 3), F(1, 3), I(1, 3),
                                         W(1, 3), I(0, 0), W(0, 0), F(2, 3), I(2, 3), W(2, 3), I(1, 0), W(1, 0),
                                         I(2, 0), W(2, 0)}));
  const std::vector<PipelineAction> rank1 = pipeline_actions(PipelineSchedule::zb_v, shape, 1);
  EXPECT_EQ(compute_only(rank1),
            (std::vector<PipelineAction>{F(0, 1), F(0, 2), F(1, 1), F(1, 2), I(0, 2), W(0, 2), F(2, 1), I(0, 1),
                                         W(0, 1), F(2, 2), I(1, 2), W(1, 2), I(1, 1), I(2, 2), I(2, 1), W(1, 1),
                                         W(2, 2), W(2, 1)}));
  // Chunk 1's output feeds chunk 2 on the same rank: no message between them.
  EXPECT_EQ(rank1[1], F(0, 1));
  EXPECT_EQ(rank1[2], F(0, 2));
}

// Catches: DualPipeV's 8 phases off (dualpipe/dualpipev.py: F&B pairs in the middle,
// split backward only in phases 3, 6, 7), or a pair that starts its forward before the
// pair's backward has its gradient (the reference waits for both inputs). pp = 2, m = 4.
TEST(PipelineSchedule, DualPipeVFollowsItsPhases) {
  const PipelineShape shape = pipeline_shape(PipelineSchedule::dualpipev, 2, 2, 4);
  const std::vector<PipelineAction> rank0 = pipeline_actions(PipelineSchedule::dualpipev, shape, 0);
  EXPECT_EQ(compute_only(rank0),
            (std::vector<PipelineAction>{F(0, 0), F(1, 0), F(2, 0), F(0, 3), I(0, 3), W(0, 3), F(1, 3), F(3, 0),
                                         B(1, 3), F(2, 3), B(0, 0), B(2, 3), F(3, 3), B(1, 0), B(3, 3), I(2, 0),
                                         W(2, 0), I(3, 0), W(3, 0)}));
  // The pair F(2, 3) & B(0, 0): both receives before the forward.
  const size_t pair = index_of(rank0, F(2, 3));
  EXPECT_EQ(rank0[pair - 2], RecvA(2, 3, 1));
  EXPECT_EQ(rank0[pair - 1], RecvG(0, 0, 1));
  EXPECT_EQ(rank0[pair + 1], B(0, 0));
  // Rank 1 = pp - 1 runs its first F&B unpaired, as the reference does.
  EXPECT_EQ(compute_only(pipeline_actions(PipelineSchedule::dualpipev, shape, 1)),
            (std::vector<PipelineAction>{F(0, 1), F(0, 2), F(1, 1), F(1, 2), F(2, 1), B(0, 2), F(2, 2), B(0, 1),
                                         F(3, 1), B(1, 2), F(3, 2), B(1, 1), B(2, 2), B(2, 1), I(3, 2), I(3, 1),
                                         W(3, 2), W(3, 1)}));
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
// Under the V placement 2 (chunks - 2) m: chunks pp - 1 and pp share rank pp - 1.
TEST(PipelineSchedule, MessagesAreExactlyTheBoundaryTensors) {
  for (PipelineSchedule s : kAll) {
    for (int pp : {1, 2, 4}) {
      const PipelineShape shape = pipeline_shape(s, pp, chunks_per_rank(s), 8);
      const int boundaries = shape.placement == PipelinePlacement::v ? shape.chunks() - 2 : shape.chunks() - 1;
      SCOPED_TRACE(fmt::format("{} pp {}", pipeline_schedule_name(s), pp));
      std::multiset<int> sent, received;
      for (const auto& rank : pipeline_actions_of_all_ranks(s, shape)) {
        for (const PipelineAction& a : rank) {
          if (!is_communication(a.kind)) continue;
          const bool send = a.kind == Kind::send_activation || a.kind == Kind::send_gradient;
          (send ? sent : received).insert(pipeline_message_id(a, shape));
        }
      }
      const size_t expected = pp == 1 ? 0 : 2 * boundaries * shape.m;
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
// Catches: a list that lets another backward overwrite the workspace while a gradient
// waits there between a rank's two neighbouring chunks (the V's middle on rank pp - 1),
// which the runner would then read for the wrong micro-batch. pp = 2, m = 2, V placement.
TEST(PipelineValidation, GradientBetweenARanksChunksIsNotOverwritten) {
  const PipelineShape shape = pipeline_shape(PipelineSchedule::zb_v, 2, 2, 2);
  const std::vector<PipelineAction> rank0 = {
      F(0, 0),        SendA(0, 0, 1), F(1, 0),        SendA(1, 0, 1), RecvA(0, 3, 1), F(0, 3),
      B(0, 3),        SendG(0, 3, 1), RecvA(1, 3, 1), F(1, 3),        B(1, 3),        SendG(1, 3, 1),
      RecvG(0, 0, 1), B(0, 0),        RecvG(1, 0, 1), B(1, 0)};
  const std::vector<PipelineAction> forwards1 = {RecvA(0, 1, 0), F(0, 1), F(0, 2), SendA(0, 2, 0),
                                                 RecvA(1, 1, 0), F(1, 1), F(1, 2), SendA(1, 2, 0)};
  auto rank1 = [&](std::vector<PipelineAction> backwards) {
    std::vector<PipelineAction> list = forwards1;
    list.insert(list.end(), backwards.begin(), backwards.end());
    return list;
  };
  EXPECT_NO_THROW(check_pipeline_actions({rank0, rank1({RecvG(0, 2, 0), B(0, 2), B(0, 1), SendG(0, 1, 0),
                                                        RecvG(1, 2, 0), B(1, 2), B(1, 1), SendG(1, 1, 0)})},
                                         shape));
  expect_error(
      [&] {
        check_pipeline_actions({rank0, rank1({RecvG(0, 2, 0), B(0, 2), RecvG(1, 2, 0), B(1, 2), B(0, 1),
                                              SendG(0, 1, 0), B(1, 1), SendG(1, 1, 0)})},
                               shape);
      },
      {"rank 1 action 10: RecvGradient(mb 1, chunk 2, from rank 0) runs while the input gradient of "
       "Backward(mb 0, chunk 2) waits in the workspace for chunk 1"});
}

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
               {"rank 0 action 0", "Forward(mb 0, chunk 1)", "chunk 1 lives on rank 1"});

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
