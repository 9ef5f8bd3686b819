#include "parallel/pipeline/simulator.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ndt {

namespace {

using Kind = PipelineActionKind;

double compute_cost(Kind kind, const PipelineCosts& costs) {
  switch (kind) {
    case Kind::forward: return costs.forward;
    case Kind::backward: return costs.backward;
    case Kind::backward_input: return costs.backward_input;
    case Kind::backward_weight: return costs.backward_weight;
    default: return 0;
  }
}

char kind_letter(Kind kind) {
  switch (kind) {
    case Kind::forward: return 'F';
    case Kind::backward: return 'B';
    case Kind::backward_input: return 'I';
    case Kind::backward_weight: return 'W';
    default: return '?';
  }
}

const char* kind_colour(Kind kind) {
  switch (kind) {
    case Kind::forward: return "#4c78a8";
    case Kind::backward: return "#f58518";
    case Kind::backward_input: return "#54a24b";
    case Kind::backward_weight: return "#b279a2";
    default: return "#999999";
  }
}

const char* kind_legend(Kind kind) {
  switch (kind) {
    case Kind::forward: return "Forward";
    case Kind::backward: return "Backward";
    case Kind::backward_input: return "BackwardInput";
    case Kind::backward_weight: return "BackwardWeight";
    default: return "";
  }
}

constexpr Kind kComputeKinds[] = {Kind::forward, Kind::backward, Kind::backward_input, Kind::backward_weight};

// The shortest compute action: the time one text column stands for.
// Bounds of the drawings, whatever the costs' ratio: a text line of at most this many
// columns per rank, an SVG at most this many pixels wide.
constexpr double kMaxTextColumns = 65536;
constexpr double kMaxSvgWidth = 100000;

double shortest_compute(const PipelineSimulation& s) {
  double shortest = s.makespan;
  for (const auto& rank : s.timeline) {
    for (const TimedPipelineAction& t : rank) {
      if (!is_communication(t.action.kind)) shortest = std::min(shortest, t.end - t.start);
    }
  }
  return shortest > 0 ? shortest : 1;
}

std::string text_label(const PipelineAction& a, const PipelineShape& shape) {
  std::string label = fmt::format("{}{}", kind_letter(a.kind), a.micro_batch);
  if (shape.v > 1) label += static_cast<char>('a' + shape.local_index(a.chunk));
  if (shape.seq_chunks > 1) label += fmt::format(".{}", a.seq_chunk);
  return label;
}

// 1, 2 or 5 times a power of ten, near a tenth of the span: the time axis's tick step.
double tick_step(double span) {
  const double raw = std::max(span / 10, 1e-9);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * power >= raw) return factor * power;
  }
  return 10 * power;
}

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

}  // namespace

void check_pipeline_costs(const PipelineCosts& costs) {
  auto positive = [](const char* name, double value) {
    NDT_CHECK(std::isfinite(value) && value > 0, "the {} cost (--{}-cost) = {} must be a positive number", name,
              name, value);
  };
  positive("forward", costs.forward);
  positive("backward", costs.backward);
  positive("backward-input", costs.backward_input);
  positive("backward-weight", costs.backward_weight);
  NDT_CHECK(std::isfinite(costs.communication) && costs.communication >= 0,
            "the communication cost (--communication-cost) = {} must be zero or a positive number",
            costs.communication);
}

PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& ranks,
                                     const PipelineShape& shape, const PipelineCosts& costs) {
  return simulate_pipeline(ranks, shape, std::vector<PipelineCosts>(static_cast<size_t>(shape.pp), costs));
}

PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& ranks,
                                     const PipelineShape& shape, const std::vector<PipelineCosts>& costs_per_rank) {
  NDT_CHECK(static_cast<int>(costs_per_rank.size()) == shape.pp, "simulate_pipeline: {} costs for {} ranks",
            costs_per_rank.size(), shape.pp);
  for (const PipelineCosts& costs : costs_per_rank) check_pipeline_costs(costs);
  check_pipeline_actions(ranks, shape);
  PipelineSimulation s;
  s.shape = shape;
  s.timeline.resize(shape.pp);
  s.busy.assign(shape.pp, 0);
  s.peak_live_activations.assign(shape.pp, 0);
  std::vector<double> clock(shape.pp, 0);
  std::vector<int> live(shape.pp, 0);
  std::vector<double> arrival(static_cast<size_t>(shape.m) * shape.seq_chunks * shape.chunks() * 2, 0);
  replay_pipeline_actions(ranks, shape, [&](int r, size_t i) {
    const PipelineAction& a = ranks[r][i];
    const PipelineCosts& costs = costs_per_rank[static_cast<size_t>(r)];
    TimedPipelineAction t{clock[r], clock[r], a};
    switch (a.kind) {
      case Kind::send_activation:
      case Kind::send_gradient: arrival[pipeline_message_id(a, shape)] = clock[r] + costs.communication; break;
      case Kind::recv_activation:
      case Kind::recv_gradient: t.end = std::max(clock[r], arrival[pipeline_message_id(a, shape)]); break;
      default:
        t.end = t.start + compute_cost(a.kind, costs) / (shape.v * shape.seq_chunks);
        s.busy[r] += t.end - t.start;
        if (a.kind == Kind::forward) s.peak_live_activations[r] = std::max(s.peak_live_activations[r], ++live[r]);
        if (a.kind == Kind::backward || a.kind == Kind::backward_weight) --live[r];
    }
    clock[r] = t.end;
    s.timeline[r].push_back(t);
  });
  s.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < shape.pp; ++r) {
    s.bubble.push_back(s.makespan > 0 ? (s.makespan - s.busy[r]) / s.makespan : 0);
  }
  s.mean_bubble = std::accumulate(s.bubble.begin(), s.bubble.end(), 0.0) / shape.pp;
  for (const auto& actions : ranks) s.peak_live_contexts.push_back(peak_live_contexts(actions));
  return s;
}

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, const PipelineShape& shape,
                                     const PipelineCosts& costs) {
  return simulate_pipeline(pipeline_actions_of_all_ranks(schedule, shape), shape, costs);
}

PipelineBubbleTheory pipeline_bubble_theory(PipelineSchedule schedule, const PipelineShape& shape,
                                            const PipelineCosts& costs) {
  const int p = shape.pp, m = shape.m, v = shape.v;
  switch (schedule) {
    case PipelineSchedule::gpipe:
    case PipelineSchedule::one_f_one_b:
      return {double(p - 1) / (m + p - 1), fmt::format("(p-1)/(m+p-1) = {}/{}", p - 1, m + p - 1)};
    case PipelineSchedule::interleaved_1f1b:
      return {double(p - 1) / (v * m + p - 1), fmt::format("(p-1)/(v*m+p-1) = {}/{}", p - 1, v * m + p - 1)};
    case PipelineSchedule::seq1f1b: {
      const int k = shape.seq_chunks;
      return {double(p - 1) / (k * m + p - 1), fmt::format("(p-1)/(k*m+p-1) = {}/{}", p - 1, k * m + p - 1)};
    }
    case PipelineSchedule::zb_h1: {
      const double idle = (p - 1) * (costs.forward + costs.backward_input - costs.backward_weight);
      const double work = m * (costs.forward + costs.backward_input + costs.backward_weight);
      return {idle / (work + idle),
              fmt::format("(p-1)(F+BI-BW)/(m(F+BI+BW)+(p-1)(F+BI-BW)) = {:g}/{:g}", idle, work + idle)};
    }
    case PipelineSchedule::zb_v: {
      const double idle = (p - 1) * costs.forward / 2;  // the ramp: p - 1 chunk-forwards
      const double work = m * (costs.forward + costs.backward_input + costs.backward_weight);
      return {idle / (work + idle), fmt::format("(p-1)(F/2)/(m(F+BI+BW)+(p-1)(F/2)) = {:g}/{:g}", idle, work + idle)};
    }
    case PipelineSchedule::dualpipev: {
      // Per chunk (half a rank's costs): F&B = F + B (no overlap here), B = BI + BW.
      const double f = costs.forward / 2, b = (costs.backward_input + costs.backward_weight) / 2;
      const double idle = (p - 1) * ((f + b) + b - 3 * costs.backward_weight / 2);
      const double work = m * (costs.forward + costs.backward_input + costs.backward_weight);
      return {idle / (work + idle),
              fmt::format("(p-1)(F&B+B-3W)/(m(F+BI+BW)+(p-1)(F&B+B-3W)), chunk costs, F&B = F+B = {:g}/{:g}", idle,
                          work + idle)};
    }
  }
  fail("unknown pipeline schedule {}", static_cast<int>(schedule));
}

std::string render_pipeline_text(const PipelineSimulation& s) {
  // A column is the shortest action's time, unless the costs are so far apart that the
  // lines would pass kMaxTextColumns: then shorter actions share columns.
  const double column_time = std::max(shortest_compute(s), s.makespan / kMaxTextColumns);
  size_t width = 1;
  for (const auto& rank : s.timeline) {
    for (const TimedPipelineAction& t : rank) {
      if (!is_communication(t.action.kind)) width = std::max(width, text_label(t.action, s.shape).size());
    }
  }
  auto column = [&](double time) { return static_cast<size_t>(std::lround(time / column_time)); };
  std::string out = fmt::format("time per column {:g}; F forward, B backward, I input gradient, W weight "
                                "gradient, then the micro-batch{}; '.' idle\n",
                                column_time,
                                s.shape.v > 1            ? " and the rank's chunk (a, b, ...)"
                                : s.shape.seq_chunks > 1 ? " and .the sequence chunk"
                                                         : "");
  const size_t columns = column(s.makespan);
  for (size_t r = 0; r < s.timeline.size(); ++r) {
    std::string line(columns * width, '.');
    for (const TimedPipelineAction& t : s.timeline[r]) {
      if (is_communication(t.action.kind)) continue;
      const size_t begin = column(t.start) * width;
      const size_t length = std::max<size_t>(column(t.end) - column(t.start), 1) * width;
      std::string cell = text_label(t.action, s.shape);
      cell.resize(length, ' ');
      line.replace(begin, std::min(length, line.size() - begin), cell.substr(0, line.size() - begin));
    }
    out += fmt::format("rank {:>2} |{}|\n", r, line);
  }
  return out;
}

std::string render_pipeline_svg(const PipelineSimulation& s, const std::string& title) {
  const double left = 70, top = 40, row_height = 28, row_gap = 6, right = 20;
  // The shortest box at least 18 px wide (while the chart stays within kMaxSvgWidth px),
  // the whole chart at least 900 px.
  const double makespan = std::max(s.makespan, 1e-9);
  const double unit = std::max(std::min(18 / shortest_compute(s), kMaxSvgWidth / makespan), 900 / makespan);
  const double chart_width = s.makespan * unit;
  const int ranks = static_cast<int>(s.timeline.size());
  const double axis_y = top + ranks * (row_height + row_gap);
  const double width = left + chart_width + right, height = axis_y + 70;

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"15\">{3}</text>\n",
      width, height, left, xml_escaped(title));
  for (int r = 0; r < ranks; ++r) {
    const double y = top + r * (row_height + row_gap);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"13\" text-anchor=\"end\">rank {}</text>\n", left - 8,
                       y + row_height / 2 + 4, r);
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"#f2f2f2\"/>\n", left, y,
                       chart_width, row_height);
    for (const TimedPipelineAction& t : s.timeline[r]) {
      if (is_communication(t.action.kind)) continue;
      const double x = left + t.start * unit, w = (t.end - t.start) * unit;
      const int local_chunk = s.shape.local_index(t.action.chunk);
      const double opacity = s.shape.v > 1 ? 1 - 0.45 * local_chunk / (s.shape.v - 1) : 1;
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" fill-opacity=\"{:.2f}\" "
          "stroke=\"white\"><title>{} [{:g}, {:g})</title></rect>\n",
          x, y, w, row_height, kind_colour(t.action.kind), opacity, describe(t.action), t.start, t.end);
      svg += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\" fill=\"white\">{}</text>\n",
          x + w / 2, y + row_height / 2 + 4, t.action.micro_batch);
    }
  }
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n", left,
                     axis_y, left + chart_width);
  const double step = tick_step(s.makespan);
  for (double time = 0; time <= s.makespan + 1e-9; time += step) {
    const double x = left + time * unit;
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n", x,
                       axis_y, axis_y + 5);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{:g}</text>\n", x,
                       axis_y + 18, time);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">time</text>\n",
                     left + chart_width, axis_y + 32);
  double legend_x = left;
  for (Kind kind : kComputeKinds) {
    const bool present = std::any_of(s.timeline.begin(), s.timeline.end(), [&](const auto& rank) {
      return std::any_of(rank.begin(), rank.end(), [&](const TimedPipelineAction& t) { return t.action.kind == kind; });
    });
    if (!present) continue;
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", legend_x,
                       axis_y + 44, kind_colour(kind));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\">{}</text>\n", legend_x + 16, axis_y + 54,
                       kind_legend(kind));
    legend_x += 130;
  }
  if (s.shape.v > 1) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\">lighter: later chunks of the rank</text>\n",
                       legend_x, axis_y + 54);
  }
  return svg + "</svg>\n";
}

}  // namespace ndt
