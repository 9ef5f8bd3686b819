// The pipeline simulator (parallel/pipeline/simulator.h) against the theory: bubble
// fractions of GPipe, 1F1B, interleaved 1F1B and ZB-H1, activation peaks, the effect of
// costs and communication time, and the text and SVG timelines.
#include "../common/errors.h"
#include "parallel/pipeline/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using Kind = PipelineActionKind;

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// Catches: a simulator that lets a rank start before its input arrived, or times
// actions in the wrong order; GPipe's and 1F1B's bubble is (p-1)/(m+p-1) on every rank,
// for m below, equal to and above p (makespan (m+p-1)(F+B)).
TEST(PipelineSimulator, GPipeAndOneFOneBBubbleIsTheTextbookOne) {
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 4, 8, 16}) {
        SCOPED_TRACE(fmt::format("{} p {} m {}", pipeline_schedule_name(schedule), p, m));
        const PipelineSimulation s = simulate_pipeline(schedule, {p, 1, m});
        const double theory = double(p - 1) / (m + p - 1);
        EXPECT_DOUBLE_EQ(s.makespan, 3.0 * (m + p - 1));
        for (double bubble : s.bubble) EXPECT_NEAR(bubble, theory, 1e-12);
        EXPECT_NEAR(s.mean_bubble, theory, 1e-12);
        EXPECT_NEAR(pipeline_bubble_theory(schedule, {p, 1, m}, {}).fraction, theory, 1e-12);
      }
    }
  }
}

// Catches: interleaving that does not divide the bubble by v. With chunks costing 1/v
// of a stage, the simulated bubble is exactly (p-1)/(v m + p - 1) (Narayanan et al.
// 2021: bubble time (p-1)(F+B)/v against the ideal m(F+B)).
TEST(PipelineSimulator, InterleavedBubbleIsDividedByV) {
  for (int p : {2, 4}) {
    for (int v : {2, 3, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE(fmt::format("p {} v {} m {}", p, v, m));
        const PipelineShape shape{p, v, m};
        const PipelineSimulation s = simulate_pipeline(PipelineSchedule::interleaved_1f1b, shape);
        const double theory = double(p - 1) / (v * m + p - 1);
        EXPECT_NEAR(s.mean_bubble, theory, 1e-12);
        EXPECT_NEAR(pipeline_bubble_theory(PipelineSchedule::interleaved_1f1b, shape, {}).fraction, theory, 1e-12);
        EXPECT_LT(s.mean_bubble, simulate_pipeline(PipelineSchedule::one_f_one_b, {p, 1, m}).mean_bubble);
      }
    }
  }
}

// Catches: weight passes that do not fill the bubble. With F = BI = BW = 1, ZB-H1's
// idle time is a third of 1F1B's, (p-1)(F+BI-BW) against (p-1)(F+B), and the fraction
// matches Qi et al.'s formula for m >= p; at p = 4, m = 8: 3/27 against 1F1B's 3/11.
TEST(PipelineSimulator, ZeroBubbleIdlesAThirdOfOneFOneB) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE(fmt::format("p {} m {}", p, m));
      const PipelineSimulation zb = simulate_pipeline(PipelineSchedule::zb_h1, {p, 1, m});
      const PipelineSimulation one_f_one_b = simulate_pipeline(PipelineSchedule::one_f_one_b, {p, 1, m});
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(zb.makespan - zb.busy[r], (one_f_one_b.makespan - one_f_one_b.busy[r]) / 3, 1e-12);
      }
      EXPECT_NEAR(zb.mean_bubble, pipeline_bubble_theory(PipelineSchedule::zb_h1, {p, 1, m}, {}).fraction, 1e-12);
      EXPECT_LT(zb.mean_bubble, 0.5 * one_f_one_b.mean_bubble);
    }
  }
  EXPECT_NEAR(simulate_pipeline(PipelineSchedule::zb_h1, {4, 1, 8}).mean_bubble, 3.0 / 27, 1e-12);
}

// Catches: a V schedule whose order leaves more idle time than its published bubble, at
// the costs the formulas assume (F = BI = BW per stage: every chunk-pass the same).
// ZB-V (Qi et al. 2024, section 6: zero bubble at equal costs, but for the ramp of p - 1
// chunk-forwards): idle (p-1) F/2 per rank, fraction (p-1)/(6m+p-1) at F = 1. DualPipeV
// (DeepSeek's DualPipe README table: (PP/2-1)(F&B+B-3W) with its PP = 2p stages and chunk
// costs, F&B = F+B here): idle (p-1)(1/2 + 1 + 1 - 3/2) = p - 1, fraction (p-1)/(3m+p-1),
// ZB-H1's. Every rank idles the same; ZB-V below ZB-H1.
TEST(PipelineSimulator, VSchedulesHaveThePublishedBubble) {
  for (int p : {2, 3, 4}) {
    for (int m : {2 * p, 2 * p + 3, 12}) {
      SCOPED_TRACE(fmt::format("p {} m {}", p, m));
      const PipelineSimulation zb_v = simulate_pipeline(PipelineSchedule::zb_v, pipeline_shape(PipelineSchedule::zb_v, p, 2, m));
      const PipelineSimulation dual =
          simulate_pipeline(PipelineSchedule::dualpipev, pipeline_shape(PipelineSchedule::dualpipev, p, 2, m));
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(zb_v.makespan - zb_v.busy[r], (p - 1) * 0.5, 1e-12) << "zb_v rank " << r;
        EXPECT_NEAR(dual.makespan - dual.busy[r], p - 1.0, 1e-12) << "dualpipev rank " << r;
      }
      EXPECT_NEAR(zb_v.mean_bubble, double(p - 1) / (6 * m + p - 1), 1e-12);
      EXPECT_NEAR(dual.mean_bubble, double(p - 1) / (3 * m + p - 1), 1e-12);
      for (PipelineSchedule s : {PipelineSchedule::zb_v, PipelineSchedule::dualpipev}) {
        const PipelineSimulation& sim = s == PipelineSchedule::zb_v ? zb_v : dual;
        EXPECT_NEAR(pipeline_bubble_theory(s, pipeline_shape(s, p, 2, m), {}).fraction, sim.mean_bubble, 1e-12)
            << pipeline_schedule_name(s);
      }
      const double zb_h1 = simulate_pipeline(PipelineSchedule::zb_h1, {p, 1, m}).mean_bubble;
      EXPECT_LT(zb_v.mean_bubble, zb_h1);
      EXPECT_NEAR(dual.mean_bubble, zb_h1, 1e-12);
    }
  }
}

// Catches: a V schedule holding more activations than published: ZB-V 1F1B's p stages'
// worth (2p chunk-activations of half a stage; Qi et al. 2024), DualPipeV PP + 1 = 2p + 1
// chunk-activations (DualPipe README), once m >= 2p.
TEST(PipelineSimulator, VSchedulesHoldThePublishedActivations) {
  for (int p : {2, 3, 4}) {
    for (int m : {2 * p, 12}) {
      SCOPED_TRACE(fmt::format("p {} m {}", p, m));
      const auto peak = [&](PipelineSchedule s) {
        const std::vector<int> live = simulate_pipeline(s, pipeline_shape(s, p, 2, m)).peak_live_activations;
        return *std::max_element(live.begin(), live.end());
      };
      EXPECT_EQ(peak(PipelineSchedule::zb_v), 2 * p);
      EXPECT_EQ(peak(PipelineSchedule::dualpipev), 2 * p + 1);
    }
  }
}

// Catches: activations counted at the wrong passes (freed at BackwardInput instead of
// BackwardWeight, or never freed): GPipe holds m, 1F1B min(p - r, m) on rank r (rank 0
// exactly p when m >= p), ZB-H1 min(p, m) on every rank, interleaved rank 0 its warm-up
// plus one chunk.
TEST(PipelineSimulator, PeakLiveActivationsFollowTheSchedule) {
  for (int p : {2, 4}) {
    for (int m : {1, 3, 4, 8}) {
      SCOPED_TRACE(fmt::format("p {} m {}", p, m));
      const PipelineShape shape{p, 1, m};
      const PipelineSimulation gpipe = simulate_pipeline(PipelineSchedule::gpipe, shape);
      const PipelineSimulation one_f_one_b = simulate_pipeline(PipelineSchedule::one_f_one_b, shape);
      const PipelineSimulation zb = simulate_pipeline(PipelineSchedule::zb_h1, shape);
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe.peak_live_activations[r], m);
        EXPECT_EQ(one_f_one_b.peak_live_activations[r], std::min(p - r, m));
        EXPECT_EQ(zb.peak_live_activations[r], std::min(p, m));
      }
    }
  }
  const PipelineSimulation interleaved = simulate_pipeline(PipelineSchedule::interleaved_1f1b, {4, 2, 8});
  EXPECT_EQ(interleaved.peak_live_activations[0], 2 * (4 - 1) + (2 - 1) * 4 + 1);
}

// Catches: costs not applied per kind, a chunk not costing 1/v of a stage, or the
// communication time charged to the sender instead of delaying the receiver. pp = 2,
// m = 1: F on rank 0, message, F and B on rank 1, message, B on rank 0.
// Catches: per-rank costs ignored or applied to the wrong rank.
// Catches: contexts in flight counted as (micro-batch, chunk) pairs / v under interleaving,
// where the two coincide for v = 1 only (the planner's memory was 6 contexts for 8).
// Interleaved pp 2, v 2, m 8, rank 0: 2 (p - r - 1) + (v - 1) p = 4 warm-up chunk-forwards
// (micro-batches 0, 1 through chunk 0, then through chunk 1), then F(2, c0) and F(3, c0)
// each before a chunk-1 backward: 4 contexts, the first freed only by B(0, c0); the pairs
// peak at 5, and 5 / 2 rounds up to 3. Rank 1 (no warm-up beyond the group): 3 contexts,
// 3 pairs.
TEST(PipelineSimulator, ContextsInFlightAreTheRunnersUnderInterleavingToo) {
  const PipelineSimulation s = simulate_pipeline(PipelineSchedule::interleaved_1f1b, {2, 2, 8});
  EXPECT_EQ(s.peak_live_contexts, (std::vector<int>{4, 3}));
  EXPECT_EQ(s.peak_live_activations, (std::vector<int>{5, 3}));
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1}) {
    const PipelineSimulation one = simulate_pipeline(schedule, {4, 1, 8});
    EXPECT_EQ(one.peak_live_contexts, one.peak_live_activations) << pipeline_schedule_name(schedule);
  }
  // One rank's list alone gives the same.
  EXPECT_EQ(peak_live_contexts(pipeline_actions(PipelineSchedule::interleaved_1f1b, {4, 2, 8}, 0)), 8);
}

TEST(PipelineSimulator, EachRankCanHaveItsOwnCosts) {
  const PipelineShape shape{2, 1, 4};
  const auto lists = pipeline_actions_of_all_ranks(PipelineSchedule::one_f_one_b, shape);
  const PipelineSimulation uniform = simulate_pipeline(lists, shape, PipelineCosts{});
  const PipelineSimulation same = simulate_pipeline(lists, shape, std::vector<PipelineCosts>(2));
  EXPECT_EQ(same.makespan, uniform.makespan);
  EXPECT_EQ(same.bubble, uniform.bubble);
  // The last stage twice as slow: rank 0 waits for it, and the makespan is rank 1's
  // 4 x (2 + 4) of work, after the first forward it waits for on rank 0 (1), before
  // rank 0's last backward (2).
  std::vector<PipelineCosts> slow_last(2);
  slow_last[1].forward = 2, slow_last[1].backward = 4;
  const PipelineSimulation slow = simulate_pipeline(lists, shape, slow_last);
  EXPECT_DOUBLE_EQ(slow.makespan, 1 + 4 * 6.0 + 2);
  EXPECT_DOUBLE_EQ(slow.busy[0], 4 * 3.0);
  EXPECT_DOUBLE_EQ(slow.busy[1], 4 * 6.0);
  expect_error([&] { simulate_pipeline(lists, shape, std::vector<PipelineCosts>(3)); }, {"3 costs for 2 ranks"});
}

TEST(PipelineSimulator, CostsAndCommunicationTimeDelayTheReceiver) {
  PipelineCosts costs;
  costs.forward = 1.5;
  costs.backward = 2.5;
  costs.communication = 0.25;
  const PipelineSimulation s = simulate_pipeline(PipelineSchedule::one_f_one_b, {2, 1, 1}, costs);
  EXPECT_DOUBLE_EQ(s.makespan, 1.5 + 0.25 + 1.5 + 2.5 + 0.25 + 2.5);
  EXPECT_DOUBLE_EQ(s.busy[0], 4);
  EXPECT_DOUBLE_EQ(s.busy[1], 4);
  const std::vector<TimedPipelineAction>& rank1 = s.timeline[1];
  ASSERT_EQ(rank1.front().action.kind, Kind::recv_activation);
  EXPECT_DOUBLE_EQ(rank1.front().start, 0);
  EXPECT_DOUBLE_EQ(rank1.front().end, 1.75);
  EXPECT_DOUBLE_EQ(s.timeline[0][1].start, s.timeline[0][1].end);  // the send takes no time on rank 0

  costs = {};
  costs.backward_input = 2;
  costs.backward_weight = 0.5;
  const PipelineSimulation split = simulate_pipeline(PipelineSchedule::zb_h1, {2, 1, 2}, costs);
  EXPECT_DOUBLE_EQ(split.busy[0], 2 * (1 + 2));        // rank 0: fused backward
  EXPECT_DOUBLE_EQ(split.busy[1], 2 * (1 + 2 + 0.5));  // rank 1: input and weight passes

  const PipelineSimulation chunks = simulate_pipeline(PipelineSchedule::interleaved_1f1b, {2, 4, 2});
  EXPECT_DOUBLE_EQ(chunks.busy[0], 2 * 3.0);  // v chunks of 1/v stage each
}

// Catches: actions overlapping on a rank or a compute starting before its receive ended.
TEST(PipelineSimulator, TimelineIsSequentialPerRank) {
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                    PipelineSchedule::interleaved_1f1b, PipelineSchedule::zb_h1}) {
    const int v = schedule == PipelineSchedule::interleaved_1f1b ? 2 : 1;
    PipelineCosts costs;
    costs.communication = 0.3;
    const PipelineSimulation s = simulate_pipeline(schedule, {4, v, 8}, costs);
    for (const auto& rank : s.timeline) {
      for (size_t i = 1; i < rank.size(); ++i) {
        EXPECT_GE(rank[i].start, rank[i - 1].end) << describe(rank[i].action);
        EXPECT_GE(rank[i].end, rank[i].start);
      }
      EXPECT_LE(rank.back().end, s.makespan);
    }
  }
}

// Catches: bad costs reaching the simulation (a zero cost makes the text scale divide
// by zero) or refused without the option and value.
TEST(PipelineSimulator, BadCostsAreRefused) {
  PipelineCosts costs;
  costs.forward = 0;
  expect_error([&] { simulate_pipeline(PipelineSchedule::gpipe, {2, 1, 2}, costs); }, {"--forward-cost", "= 0"});
  costs = {};
  costs.communication = -1;
  expect_error([&] { simulate_pipeline(PipelineSchedule::gpipe, {2, 1, 2}, costs); }, {"--communication-cost", "-1"});
}

// Catches: the text timeline drawing actions at the wrong time or width. 1F1B, pp = 2,
// m = 2: rank 0 F0 F1, waits for rank 1's B0 (2 units), B0, waits, B1.
TEST(PipelineRendering, TextTimelineShowsEveryActionAtItsTime) {
  const std::string text = render_pipeline_text(simulate_pipeline(PipelineSchedule::one_f_one_b, {2, 1, 2}));
  EXPECT_NE(text.find("rank  0 |F0F1....B0  ..B1  |\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rank  1 |..F0B0  F1B1  ....|\n"), std::string::npos) << text;
  const std::string interleaved =
      render_pipeline_text(simulate_pipeline(PipelineSchedule::interleaved_1f1b, {1, 2, 1}));
  EXPECT_NE(interleaved.find("time per column 0.5;"), std::string::npos) << interleaved;
  EXPECT_NE(interleaved.find("rank  0 |F0aF0bB0b   B0a   |\n"), std::string::npos) << interleaved;
}

// Catches: the SVG missing actions, mixing up the colours of the kinds, or breaking on
// a title with markup characters.
// Catches: costs far apart (1e-9 against 1e9) drawing a timeline of 1e18 columns, which
// ended in "internal error: std::bad_alloc"; a step of a billion micro-batches building
// its action lists until memory ran out.
TEST(PipelineRendering, CostsFarApartAndHugeStepsAreBounded) {
  PipelineCosts costs;
  costs.forward = 1e-9, costs.backward = 1e9;
  const PipelineSimulation s = simulate_pipeline(PipelineSchedule::one_f_one_b, {4, 1, 8}, costs);
  const std::string text = render_pipeline_text(s);
  EXPECT_LT(text.size(), size_t{4} * 65536 * 4 + 4096);  // 4 ranks of at most 65536 columns of 4 characters
  EXPECT_NE(text.find("rank  3 |"), std::string::npos);
  const std::string svg = render_pipeline_svg(s, "far apart");
  const double width = std::stod(svg.substr(svg.find("width=\"") + 7));
  EXPECT_LE(width, 100000 + 200);
  try {
    simulate_pipeline(PipelineSchedule::one_f_one_b, {4, 1, 1000000000});
    ADD_FAILURE() << "a billion micro-batches were simulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pp = 4 x parallel.pp_virtual_stages = 1 x 1000000000 micro-batches "
                                         "per step = 4000000000 (micro-batch, chunk) pairs in one step's schedule: more "
                                         "than 1048576"),
              std::string::npos)
        << e.what();
  }
  // The edge itself runs.
  EXPECT_NO_THROW(check_pipeline_shape(PipelineSchedule::one_f_one_b, {4, 1, int{kMaxPipelinePairs / 4}}));
}

TEST(PipelineRendering, SvgHasABoxPerComputeActionColouredByKind) {
  const PipelineSimulation s = simulate_pipeline(PipelineSchedule::zb_h1, {4, 1, 8});
  const std::string svg = render_pipeline_svg(s, "zb_h1 <pp = 4> & m = 8");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  EXPECT_NE(svg.find("zb_h1 &lt;pp = 4&gt; &amp; m = 8"), std::string::npos);
  // Rank 0 runs 8 forwards and 8 fused backwards; ranks 1-3 split theirs.
  EXPECT_EQ(occurrences(svg, "fill=\"#4c78a8\" fill-opacity"), 32u);  // forward
  EXPECT_EQ(occurrences(svg, "fill=\"#f58518\" fill-opacity"), 8u);   // backward
  EXPECT_EQ(occurrences(svg, "fill=\"#54a24b\" fill-opacity"), 24u);  // backward input
  EXPECT_EQ(occurrences(svg, "fill=\"#b279a2\" fill-opacity"), 24u);  // backward weight
  EXPECT_EQ(occurrences(svg, "<title>Forward(mb 7, chunk 3)"), 1u);
  EXPECT_EQ(occurrences(svg, ">rank "), 4u);
}

}  // namespace
}  // namespace ndt
