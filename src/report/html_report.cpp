#include "report/html_report.h"

#include "report/run_summary.h"
#include "report/svg_chart.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

namespace ndt {

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
constexpr double kMiB = 1024.0 * 1024.0;

ChartLine line_of(const std::string& name, const Series& series, double scale, size_t colour) {
  ChartLine line;
  line.name = name;
  line.colour = kPalette[colour % std::size(kPalette)];
  for (const auto& [step, value] : series) {
    line.x.push_back(static_cast<double>(step));
    line.y.push_back(value * scale);
  }
  return line;
}

// One line per key (axis, tag), colours in key order.
std::vector<ChartLine> lines_of(const std::map<std::string, Series>& by_key, double scale) {
  std::vector<ChartLine> lines;
  for (const auto& [key, series] : by_key) lines.push_back(line_of(key, series, scale, lines.size()));
  return lines;
}

// Resumes on every chart; with all_events, every event (clips as rings on `on`, the
// gradient norm's line, when given).
std::vector<ChartMarker> markers_of(const RunMetrics& m, bool all_events, const Series* on = nullptr) {
  std::vector<ChartMarker> markers;
  for (const RunEvent& e : m.events) {
    if (e.kind != "resume" && !all_events) continue;
    ChartMarker marker{static_cast<double>(e.step), std::nullopt, e.kind, e.text};
    if (e.kind == "clip") {
      if (!on || !on->count(e.step)) continue;
      marker.y = on->at(e.step);
    }
    markers.push_back(marker);
  }
  return markers;
}

LineChart titled(const std::string& id, const std::string& title, const std::string& y_label) {
  LineChart c;
  c.id = id, c.title = title, c.y_label = y_label;
  return c;
}

std::string chart(LineChart c, std::vector<ChartLine> lines, std::vector<ChartMarker> markers) {
  c.lines = std::move(lines);
  c.markers = std::move(markers);
  return "<div class=\"chart\">\n" + render_line_chart(c) + "</div>\n";
}

std::string row(const std::string& key, const std::string& value) {
  return fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", xml_text(key), xml_text(value));
}

// parallel.layout = "auto": the layout the planner chose, its prediction and what the run measured.
std::string layout_check_rows(const nlohmann::json& check) {
  const double predicted = check.value("predicted_step_s", 0.0), measured = check.value("measured_step_s", 0.0);
  const std::string runner_up = check.value("runner_up", std::string());
  std::string html = row("layout (auto)", check.value("layout", std::string("?")));
  html += row("predicted against measured",
              fmt::format("step {:.4g} s predicted, {:.4g} s measured (median of {} steps to step {}): {:+.1f}%; "
                          "memory {:.1f} MiB per device and MFU {:.1f}% predicted",
                          predicted, measured, check.value("measured_steps", 0), check.value("step", 0),
                          100 * check.value("error", 0.0), check.value("predicted_memory_bytes", 0.0) / (1 << 20),
                          100 * check.value("predicted_mfu", 0.0)));
  html += row("runner-up", runner_up.empty() ? std::string("none")
                                             : fmt::format("{}: step {:.4g} s predicted", runner_up,
                                                           check.value("runner_up_predicted_step_s", 0.0)));
  return html + row("device profile", check.value("device", std::string("?")));
}

std::string run_section(const RunMetrics& m) {
  if (m.runs.empty()) return "<p>No run record (metrics written before ndtrain recorded the config).</p>\n";
  const nlohmann::json& run = m.runs.back();
  const nlohmann::json mesh = run.value("mesh", nlohmann::json::object());
  std::string shape;
  for (const char* axis : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"}) {
    shape += fmt::format("{}{} = {}", shape.empty() ? "" : ", ", axis, mesh.value(axis, nlohmann::json()).dump());
  }
  std::string html = "<table class=\"run\">\n";
  html += row("mesh", shape);
  html += row("world size", run.value("world_size", nlohmann::json()).dump());
  html += row("model parameters", fmt::format("{:.3f} M", run.value("parameters", 0.0) / 1e6));
  html += row("MFU peak", fmt::format("{:.1f} GFLOP/s per rank ({})", run.value("peak_flops", 0.0) / 1e9,
                                      run.value("peak_flops_source", std::string("?"))));
  html += row("this part started at step", run.value("start_step", nlohmann::json()).dump() +
                                                (run.value("resumed", false) ? " (resumed)" : ""));
  for (const nlohmann::json& check : m.layout_checks) html += layout_check_rows(check);
  return html + "</table>\n";
}

// Long (every key): last, folded.
std::string config_section(const RunMetrics& m) {
  if (m.runs.empty()) return "";
  const nlohmann::json config = m.runs.back().value("config", nlohmann::json::object());
  std::string html = fmt::format("<h2>Configuration</h2>\n<details>\n<summary>{} keys, resolved, of the latest part of "
                                 "the run (values as TOML writes them)</summary>\n<table class=\"config\">\n",
                                 config.size());
  for (const auto& [key, value] : config.items()) {
    html += row(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return html + "</table>\n</details>\n";
}

std::string events_section(const RunMetrics& m) {
  if (m.events.empty()) return "<p>No events.</p>\n";
  std::string html;
  for (const auto& [kind, count] : m.event_counts) {
    if (count > kMaxEventsPerKind) {
      html += fmt::format("<p class=\"events-cut\">{} {} events: the first {} are listed and marked; every one is in "
                          "{}.</p>\n", count, xml_text(kind), kMaxEventsPerKind, xml_text(m.path.string()));
    }
  }
  html += "<table class=\"events\">\n<tr><th>step</th><th>kind</th><th>what</th></tr>\n";
  for (const RunEvent& e : m.events) {
    html += fmt::format("<tr data-kind=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>\n", xml_text(e.kind), e.step,
                        xml_text(e.kind), xml_text(e.text));
  }
  return html + "</table>\n";
}

std::optional<double> grad_clip_of(const RunMetrics& m) {
  if (m.runs.empty()) return std::nullopt;
  const nlohmann::json config = m.runs.back().value("config", nlohmann::json::object());
  if (config.value("optim.clip_mode", std::string()) != "\"norm\"") return std::nullopt;
  const double clip = std::stod(config.value("optim.grad_clip", std::string("0")));
  return clip > 0 ? std::optional<double>(clip) : std::nullopt;
}

}  // namespace

std::string render_html_report(const RunMetrics& m, const MeasuredPipeline* pipeline, const std::string& title) {
  std::string html =
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  html += fmt::format("<title>ndtrain report: {}</title>\n", xml_text(title));
  html += "<style>\nbody { font-family: sans-serif; margin: 24px; color: #222; }\n"
          "div.chart { display: inline-block; margin: 6px; vertical-align: top; }\n"
          "div.timeline { overflow-x: auto; }\n"
          "table { border-collapse: collapse; font-size: 13px; }\n"
          "th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }\n"
          "pre { background: #f6f6f6; padding: 10px; }\n</style>\n</head>\n<body>\n";
  html += fmt::format("<h1>ndtrain report: {}</h1>\n", xml_text(title));
  html += fmt::format("<pre class=\"digest\">{}</pre>\n", xml_text(format_run_digest(digest_run(m))));
  if (!m.skipped.empty()) {
    html += "<p class=\"skipped\">Lines of " + xml_text(m.path.string()) + " left out:</p>\n<ul class=\"skipped\">\n";
    for (const std::string& s : m.skipped) html += "<li>" + xml_text(s) + "</li>\n";
    html += "</ul>\n";
  }
  html += "<h2>Run</h2>\n" + run_section(m);
  html += "<h2>Charts</h2>\n";

  // Every chart marks the resumes; loss and gradient norm every event.
  const std::vector<ChartMarker> resumes = markers_of(m, false);
  std::vector<ChartLine> loss = {line_of("loss", m.loss, 1, 0), line_of("val_loss", m.val_loss, 1, 1)};
  loss[1].dots = true;
  html += chart(titled("loss", "Loss", "loss"), loss, markers_of(m, true));
  html += chart(titled("lr", "Learning rate", "lr"), {line_of("lr", m.lr, 1, 0)}, resumes);

  LineChart norm = titled("grad_norm", "Gradient norm (before clipping)", "norm");
  norm.threshold = grad_clip_of(m);
  if (norm.threshold) norm.threshold_label = fmt::format("optim.grad_clip = {:g}", *norm.threshold);
  html += chart(norm, {line_of("grad_norm", m.grad_norm, 1, 0)}, markers_of(m, true, &m.grad_norm));

  html += chart(titled("tokens_per_s", "Throughput", "tokens/s"), {line_of("tokens_per_s", m.tokens_per_s, 1, 0)},
                resumes);
  std::vector<ChartLine> flops = {line_of("MFU", m.mfu, 100, 0)};
  if (!m.hfu.empty()) flops.push_back(line_of("HFU", m.hfu, 100, 1)), flops.back().dashed = true;
  html += chart(titled("mfu", "Model and hardware FLOP utilisation", "%"), flops, resumes);

  html += chart(titled("mem_current", "Memory by tag at the end of each step (rank 0)", "MiB"),
                lines_of(m.mem_current, 1 / kMiB), resumes);
  std::vector<ChartLine> peak = lines_of(m.mem_peak, 1 / kMiB);
  peak.push_back(line_of("total", m.peak_mem_bytes, 1 / kMiB, peak.size()));
  peak.back().dashed = true;
  html += chart(titled("mem_peak", "Peak memory since the start (rank 0)", "MiB"), peak, resumes);

  html += chart(titled("comm_bytes", "Communication per step by mesh axis (rank 0)", "MiB sent"),
                lines_of(m.comm_bytes, 1 / kMiB), resumes);
  html += chart(titled("comm_wait", "Communication wait per step by mesh axis (rank 0)", "s"),
                lines_of(m.comm_wait_s, 1), resumes);

  if (pipeline) {
    const PipelineSimulation& s = pipeline->simulation;
    const std::string caption =
        fmt::format("Measured pipeline timeline of step {} (ms): {}, pp = {}, v = {}, m = {}; bubble {:.1f}%",
                    pipeline->step, pipeline->schedule, s.shape.pp, s.shape.v, s.shape.m, 100 * s.mean_bubble);
    html += "<h2>Pipeline (measured)</h2>\n<div class=\"timeline\" id=\"pipeline\">\n" +
            render_pipeline_svg(s, caption) + "</div>\n";
  }
  html += "<h2>Events</h2>\n" + events_section(m);
  html += config_section(m);
  return html + "</body>\n</html>\n";
}

}  // namespace ndt
