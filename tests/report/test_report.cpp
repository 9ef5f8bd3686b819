// The run report's parts on synthetic metrics files: reading every kind of record (and
// the damaged forms a crash or a non-finite step leaves), the charts' data and their
// mapping to pixels, events, escaping, the digest, the measured pipeline timeline.
#include "../common/temp_dir.h"
#include "svg_reading.h"
#include "report/html_report.h"
#include "report/pipeline_timeline.h"
#include "report/run_metrics.h"
#include "report/run_summary.h"
#include "report/svg_chart.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace ndt {
namespace {

using testing::series_of;
using testing::svg_by_id;

// A run record with these config values (as the trainer writes them: TOML text).
std::string run_line(int64_t start, bool resumed, const std::string& extra_config = "") {
  return std::string("{\"run\":{\"start_step\":") + std::to_string(start) + ",\"resumed\":" + (resumed ? "true" : "false") +
         ",\"world_size\":2,\"mesh\":{\"pp\":1,\"dp_replicate\":2,\"dp_shard\":1,\"cp\":1,\"tp\":1,\"ep\":1},"
         "\"parameters\":123456,\"peak_flops\":1e11,\"peak_flops_source\":\"config runtime.peak_gflops\","
         "\"config\":{\"optim.grad_clip\":\"1\",\"optim.clip_mode\":\"\\\"norm\\\"\"" + extra_config + "}}}\n";
}

// A step record; comm: rank 0's cumulative dp bytes and wait.
std::string step_line(int step, const std::string& loss, double norm, double dp_bytes, double dp_wait,
                      const std::string& extra = "") {
  return "{\"step\":" + std::to_string(step) + ",\"loss\":" + loss + ",\"lr\":" + std::to_string(0.001 * step) +
         ",\"grad_norm\":" + std::to_string(norm) + ",\"step_s\":0.5,\"tokens_per_s\":" + std::to_string(1000 + step) +
         ",\"mfu\":0.25,\"hfu\":0.3,\"peak_mem_bytes\":" + std::to_string(1048576 * (10 + step)) +
         ",\"mem\":{\"params\":{\"current\":1048576,\"peak\":1048576},\"activations\":{\"current\":0,\"peak\":" +
         std::to_string(2097152 * step) + "}},\"comm\":{\"dp\":{\"all_reduce\":{\"calls\":" + std::to_string(step) +
         ",\"wire_bytes\":" + std::to_string(dp_bytes) + ",\"wait_s\":" + std::to_string(dp_wait) + "}}}" + extra +
         "}\n";
}

class ReportTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = dir_.file("run/metrics.jsonl");
    testing::write_bytes(path, text);
    return path;
  }
  std::string error_of(const std::string& text) {
    try {
      read_run_metrics(write(text));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  testing::TempDir dir_;
};

// Catches: a record kind dropped, comm counters plotted cumulative (or diffed across a
// restarted process), an intervention counted twice, a clip or a resume not marked.
TEST_F(ReportTest, ReadsEveryKindOfRecord) {
  const RunMetrics m = read_run_metrics(write(
      run_line(0, false) + step_line(1, "5.5", 3.0, 100, 0.25) + step_line(2, "5.0", 0.5, 250, 0.5) +
      "{\"step\":2,\"val_loss\":4.9}\n" +
      step_line(3, "4.5", 0.7, 400, 1.0,
                ",\"intervention\":\"spike (update applied): loss 4.5 > 3 sigma\",\"events\":[{\"kind\":\"spike\","
                "\"text\":\"spike (update applied): loss 4.5 > 3 sigma\"}]") +
      "{\"step\":3,\"kind\":\"spike\",\"event\":\"spike (update applied): loss 4.5 > 3 sigma\"}\n" + run_line(3, true) +
      step_line(4, "4.0", 0.6, 40, 0.125) + "{\"step\":4,\"val_loss\":3.9}\n" +
      "{\"summary\":{\"last_loss\":4.0}}\n"));
  EXPECT_EQ(m.lines, 10);
  EXPECT_TRUE(m.skipped.empty());
  ASSERT_EQ(m.loss.size(), 4u);
  EXPECT_EQ(m.loss.at(3), 4.5);
  EXPECT_EQ(m.val_loss, (Series{{2, 4.9}, {4, 3.9}}));
  EXPECT_EQ(m.tokens_per_s.at(4), 1004);
  EXPECT_EQ(m.hfu.at(1), 0.3);
  EXPECT_EQ(m.mem_current.at("params").at(2), 1048576);
  EXPECT_EQ(m.mem_peak.at("activations").at(3), 3 * 2097152);
  // Differences of the cumulative counters; the resumed process starts from zero.
  EXPECT_EQ(m.comm_bytes.at("dp"), (Series{{1, 100}, {2, 150}, {3, 150}, {4, 40}}));
  EXPECT_EQ(m.comm_wait_s.at("dp"), (Series{{1, 0.25}, {2, 0.25}, {3, 0.5}, {4, 0.125}}));
  ASSERT_EQ(m.runs.size(), 2u);
  EXPECT_EQ(m.summary.at("last_loss"), 4.0);
  // Step 1's norm 3 is above optim.grad_clip = 1; the spike once; the resume after step 3.
  ASSERT_EQ(m.events.size(), 3u);
  EXPECT_EQ(m.events[0].step, 1);
  EXPECT_EQ(m.events[0].kind, "clip");
  EXPECT_EQ(m.events[1].kind, "spike");
  EXPECT_EQ(m.events[1].step, 3);
  EXPECT_EQ(m.events[2].kind, "resume");
  EXPECT_EQ(m.events[2].step, 3);
}

// Catches: a rolled-back step plotted twice (the line going back) instead of its latest
// record, or the rollback itself lost.
TEST_F(ReportTest, AStepTrainedTwiceKeepsItsLatestRecord) {
  const RunMetrics m = read_run_metrics(
      write(run_line(0, false) + step_line(1, "5", 0.5, 1, 0) + step_line(2, "9", 0.5, 2, 0) +
            "{\"step\":2,\"kind\":\"rollback\",\"event\":\"rolled back to step 1 (ckpt) and skipped training batches "
            "1..1: spike\"}\n" +
            step_line(2, "4.75", 0.5, 3, 0)));
  EXPECT_EQ(m.loss, (Series{{1, 5}, {2, 4.75}}));
  ASSERT_EQ(events_of_kind(m, "rollback").size(), 1u);
  EXPECT_EQ(events_of_kind(m, "rollback")[0].step, 2);
}

// Catches: an event charted by its wording instead of its kind: a step that spiked and
// that ZClip also clipped is both a spike and a clip (one intervention text holds both).
TEST_F(ReportTest, AStepThatIsASpikeAndAZClipClipIsChartedAsBoth) {
  const std::string spike = "spike (update applied): loss 4.5 is above the mean";
  const std::string clip = "ZClip: gradient norm 9 (z-score 7.0) clipped to 2";
  const RunMetrics m = read_run_metrics(write(
      run_line(0, false, ",\"optim.clip_mode\":\"\\\"zclip\\\"\"") + step_line(1, "5", 0.5, 1, 0) +
      step_line(2, "4.5", 9.0, 2, 0,
                ",\"intervention\":\"" + spike + "; " + clip + "\",\"events\":[{\"kind\":\"spike\",\"text\":\"" + spike +
                    "\"},{\"kind\":\"clip\",\"text\":\"" + clip + "\"}]") +
      "{\"step\":2,\"kind\":\"spike\",\"event\":\"" + spike + "\"}\n" + "{\"step\":2,\"kind\":\"clip\",\"event\":\"" +
      clip + "\"}\n"));
  ASSERT_EQ(events_of_kind(m, "spike").size(), 1u);
  EXPECT_EQ(events_of_kind(m, "spike")[0].step, 2);
  ASSERT_EQ(events_of_kind(m, "clip").size(), 1u);
  EXPECT_EQ(events_of_kind(m, "clip")[0].step, 2);
  EXPECT_EQ(events_of_kind(m, "clip")[0].text, clip);
  const std::string svg = svg_by_id(render_html_report(m, nullptr, "spike and clip"), "grad_norm");
  EXPECT_NE(svg.find("data-kind=\"spike\" data-x=\"2\""), std::string::npos);
  EXPECT_NE(svg.find("data-kind=\"clip\" data-x=\"2\""), std::string::npos);
}

// Catches: "nan"/"inf" refused (a run that stopped on a non-finite loss has no report)
// or plotted as a number; a skipped update not marked.
TEST_F(ReportTest, NonFiniteValuesAreReadAndMarked) {
  const RunMetrics m = read_run_metrics(
      write(run_line(0, false) + step_line(1, "5", 0.5, 1, 0) +
            step_line(2, "\"nan\"", 0.5, 2, 0,
                      ",\"update_skipped\":\"non-finite loss or gradient norm\",\"events\":[{\"kind\":\"nonfinite\","
                      "\"text\":\"the loss is nan and the gradient norm 0.5\"}]") +
            step_line(3, "\"inf\"", 0.5, 3, 0) + step_line(4, "4", 0.5, 4, 0) + step_line(5, "3.5", 0.5, 4, 0)));
  EXPECT_TRUE(std::isnan(m.loss.at(2)));
  EXPECT_EQ(m.loss.at(3), INFINITY);
  ASSERT_EQ(events_of_kind(m, "nonfinite").size(), 1u);
  const std::string html = render_html_report(m, nullptr, "nan run");
  const std::string svg = svg_by_id(html, "loss");
  const testing::SvgSeries s = series_of(svg, "loss");
  ASSERT_EQ(s.y.size(), 5u);
  EXPECT_TRUE(std::isnan(s.y[1]));
  EXPECT_EQ(s.y[2], INFINITY);
  // The line breaks at the non-finite steps: step 1 alone (a dot), steps 4-5 a line.
  ASSERT_EQ(s.polylines.size(), 1u);
  EXPECT_EQ(s.polylines[0].size(), 2u);
  EXPECT_EQ(testing::occurrences(svg, "class=\"nonfinite\" data-x=\"2\""), 1u);
  EXPECT_EQ(testing::occurrences(svg, "class=\"nonfinite\" data-x=\"3\""), 1u);
  EXPECT_NE(svg.find("class=\"marker\" data-kind=\"nonfinite\" data-x=\"2\""), std::string::npos);
}

// Catches: a crashed run's cut last record making the report fail.
TEST_F(ReportTest, ACutLastLineIsSkippedAndSaid) {
  const RunMetrics m =
      read_run_metrics(write(run_line(0, false) + step_line(1, "5", 0.5, 1, 0) + "{\"step\":2,\"loss\":4.8,\"lr\""));
  EXPECT_EQ(m.loss.size(), 1u);
  ASSERT_EQ(m.skipped.size(), 1u);
  EXPECT_EQ(m.skipped[0], "line 3: cut short (the run stopped while writing it), skipped");
  EXPECT_NE(render_html_report(m, nullptr, "x").find("line 3: cut short"), std::string::npos);
}

// Catches: bad input ending in a parser's message without the file and line, or a crash.
TEST_F(ReportTest, BadInputNamesTheFileAndTheLine) {
  const std::string path = dir_.file("run/metrics.jsonl");
  const std::string missing = dir_.file("nowhere/metrics.jsonl");
  try {
    read_run_metrics(missing);
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "metrics file \"" + missing + "\" does not exist");
  }
  EXPECT_EQ(error_of(""), "metrics file \"" + path + "\" is empty: the run wrote no records");
  EXPECT_EQ(error_of(run_line(0, false) + "{\"step\":1,\"loss\":\n" + step_line(2, "5", 1, 0, 0))
                .rfind(path + ":2: not a JSON record (", 0),
            0u);
  EXPECT_EQ(error_of(step_line(1, "\"abc\"", 1, 0, 0)), path + ":1: loss = \"abc\" is not a number");
  EXPECT_EQ(error_of("[1,2]\n"), path + ":1: not a JSON object: [1,2]");
  EXPECT_EQ(error_of(step_line(1, "5", 1, 0, 0) + "{\"loss\":4,\"lr\":1}\n"),
            path + ":2: the record has no integer \"step\": {\"loss\":4,\"lr\":1}");
  EXPECT_EQ(error_of("{\"step\":1,\"loss\":4,\"lr\":1}\n"), path + ":1: the step record has no \"grad_norm\"");
  // A line of terminal escapes (clear the screen, ring the bell) is quoted, not obeyed.
  const std::string escapes = error_of(step_line(1, "5", 1, 0, 0) + "\x1b[2J\x07{\"step\":2}\n");
  EXPECT_EQ(escapes.find('\x1b'), std::string::npos) << escapes;
  EXPECT_EQ(escapes.find('\x07'), std::string::npos) << escapes;
  EXPECT_NE(escapes.find(path + ":2: not a JSON record ("), std::string::npos) << escapes;
  EXPECT_NE(escapes.find("): \\x1b[2J\\x07{\"step\":2}"), std::string::npos) << escapes;
}

// Catches: points drawn where their values do not map (a flipped or offset axis, a range
// that clips data), markers away from their step.
TEST(SvgChart, PointsAndMarkersMapToTheirValues) {
  LineChart c;
  c.id = "c", c.title = "t", c.y_label = "v";
  c.lines = {{"a", {1, 2, 3, 10}, {0.5, 2.25, 1.0, 7.5}}, {"b", {2, 4}, {-1.5, 3}}};
  c.markers = {{4, std::nullopt, "resume", "resumed"}, {3, 1.0, "clip", "clipped"}};
  c.threshold = 1.0;
  const std::string svg = render_line_chart(c);
  const std::vector<double> plot = testing::numbers(testing::attribute(svg, "data-plot"));
  const std::vector<double> xr = testing::numbers(testing::attribute(svg, "data-x-range"));
  const std::vector<double> yr = testing::numbers(testing::attribute(svg, "data-y-range"));
  ASSERT_EQ(plot.size(), 4u);
  EXPECT_EQ(xr, (std::vector<double>{1, 10}));
  // y: the data's extent -1.5 .. 7.5 widened to whole ticks of 2.
  EXPECT_EQ(yr, (std::vector<double>{-2, 8}));
  const ChartFrame f = chart_frame(c);
  EXPECT_EQ(f.left, plot[0]);
  EXPECT_EQ(f.height, plot[3]);
  for (const ChartLine& line : c.lines) {
    const testing::SvgSeries s = series_of(svg, line.name);
    ASSERT_TRUE(s.found) << line.name;
    EXPECT_EQ(s.x, line.x);
    EXPECT_EQ(s.y, line.y);
    ASSERT_EQ(s.polylines.size(), 1u);
    ASSERT_EQ(s.polylines[0].size(), line.x.size());
    for (size_t i = 0; i < line.x.size(); ++i) {
      const double px = plot[0] + (line.x[i] - xr[0]) / (xr[1] - xr[0]) * plot[2];
      const double py = plot[1] + (yr[1] - line.y[i]) / (yr[1] - yr[0]) * plot[3];
      EXPECT_NEAR(s.polylines[0][i].first, px, 0.006) << line.name << " point " << i;
      EXPECT_NEAR(s.polylines[0][i].second, py, 0.006) << line.name << " point " << i;
    }
  }
  // The highest value on the top edge, the lowest x on the left edge.
  EXPECT_NEAR(f.py(8), plot[1], 1e-9);
  EXPECT_NEAR(f.px(1), plot[0], 1e-9);
  const std::string resume = "class=\"marker\" data-kind=\"resume\" data-x=\"4\" x1=\"" + fmt::format("{:.2f}", f.px(4));
  EXPECT_NE(svg.find(resume), std::string::npos) << svg;
  const std::string clip = fmt::format("class=\"marker\" data-kind=\"clip\" data-x=\"3\" data-y=\"1\" cx=\"{:.2f}\" "
                                       "cy=\"{:.2f}\"", f.px(3), f.py(1));
  EXPECT_NE(svg.find(clip), std::string::npos) << svg;
  EXPECT_NE(svg.find("class=\"threshold\" data-y=\"1\""), std::string::npos);
}

// Catches: parallel.layout = "auto"'s check (metrics.jsonl's layout_check record) left out
// of the report, or shown with other numbers than the record's.
TEST_F(ReportTest, LayoutCheckOfAnAutoLayoutRun) {
  const RunMetrics m = read_run_metrics(write(
      run_line(0, false) + step_line(1, "5", 0.5, 1, 0) +
      "{\"layout_check\":{\"step\":6,\"layout\":\"dp_shard2 | zero1 | mb2 | none\",\"device\":\"cpu: measured\","
      "\"predicted_step_s\":0.25,\"measured_step_s\":0.3,\"measured_steps\":5,\"error\":0.2,"
      "\"predicted_memory_bytes\":3145728,\"predicted_mfu\":0.125,\"runner_up\":\"dp_replicate2 | ddp | mb2 | none\","
      "\"runner_up_predicted_step_s\":0.26}}\n"));
  EXPECT_TRUE(m.skipped.empty());
  ASSERT_EQ(m.layout_checks.size(), 1u);
  const std::string html = render_html_report(m, nullptr, "auto");
  for (const char* part : {"<th>layout (auto)</th><td>dp_shard2 | zero1 | mb2 | none</td>",
                           "step 0.25 s predicted, 0.3 s measured (median of 5 steps to step 6): +20.0%; memory 3.0 MiB "
                           "per device and MFU 12.5% predicted",
                           "<th>runner-up</th><td>dp_replicate2 | ddp | mb2 | none: step 0.26 s predicted</td>",
                           "<th>device profile</th><td>cpu: measured</td>"}) {
    EXPECT_NE(html.find(part), std::string::npos) << part;
  }
}

// Catches: config text or event text breaking the page (markup, a script) or its XML.
TEST_F(ReportTest, TextFromTheRunIsEscaped) {
  EXPECT_EQ(xml_text("a<b>&\"c\"'d'"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
  const std::string hostile = "<script>alert('x')</script> & \\\"q\\\"";
  const RunMetrics m = read_run_metrics(
      write(run_line(0, false, ",\"sample.prompt\":\"" + hostile + "\"") + step_line(1, "5", 0.5, 1, 0) +
            "{\"step\":1,\"event\":\"spike (update applied): <b>bold</b> & more\"}\n"));
  const std::string html = render_html_report(m, nullptr, "run <dir> & co");
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;bold&lt;/b&gt; &amp; more"), std::string::npos);
  EXPECT_NE(html.find("<title>ndtrain report: run &lt;dir&gt; &amp; co</title>"), std::string::npos);
  // Control characters have no place in XML, even escaped: shown as \xNN.
  EXPECT_EQ(xml_text("a\x1b[31mb\x07\tc"), "a\\x1b[31mb\\x07\tc");
}

// Catches: the digest's medians including the first (page-faulting) step, a best loss
// that is not the lowest, events or bytes miscounted.
TEST_F(ReportTest, DigestOfARun) {
  const RunMetrics m = read_run_metrics(write(
      run_line(0, false) + step_line(1, "5.5", 3.0, 100, 0.25) + step_line(2, "4.25", 0.5, 250, 0.5) +
      step_line(3, "4.5", 0.7, 400, 1.0) + "{\"step\":3,\"val_loss\":4.75}\n" + run_line(3, true) +
      step_line(4, "4.375", 0.6, 40, 0.125)));
  const RunDigest d = digest_run(m);
  EXPECT_EQ(d.steps, 4);
  EXPECT_EQ(*d.final_loss, 4.375);
  EXPECT_EQ(*d.best_loss, 4.25);
  EXPECT_EQ(d.best_loss_step, 2);
  EXPECT_EQ(*d.final_val_loss, 4.75);
  EXPECT_EQ(d.median_tokens_per_s, 1003);  // steps 2..4: 1002, 1003, 1004
  EXPECT_EQ(d.peak_mem_bytes, 14 * 1048576.0);
  EXPECT_EQ(d.events, (std::map<std::string, int>{{"clip", 1}, {"resume", 1}}));
  EXPECT_EQ(d.comm_bytes.at("dp"), 440);
  EXPECT_EQ(d.parts, 2);
  const std::string text = format_run_digest(d);
  EXPECT_NE(text.find("steps: 4 (last 4), in 2 parts (resumed 1 times)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("loss: final 4.3750, best 4.2500 (step 2)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("events: 2 (1 clip, 1 resume)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("peak memory (ledger, rank 0): 14.0 MiB\n"), std::string::npos) << text;
}

// Catches: the measured timeline misread (times not in ms, busy counting waits) or a
// malformed file passing silently.
TEST_F(ReportTest, MeasuredPipelineTimeline) {
  EXPECT_FALSE(read_pipeline_timeline(dir_.file("none.json")).has_value());
  const std::string path = dir_.file("pipeline_timeline.json");
  testing::write_bytes(
      path,
      "{\"step\":7,\"schedule\":\"gpipe\",\"pp\":2,\"virtual_stages\":1,\"micro_batches\":1,\"ranks\":["
      "[{\"kind\":\"forward\",\"micro_batch\":0,\"chunk\":0,\"peer\":-1,\"start_s\":0,\"end_s\":0.001},"
      "{\"kind\":\"send_activation\",\"micro_batch\":0,\"chunk\":0,\"peer\":1,\"start_s\":0.001,\"end_s\":0.001},"
      "{\"kind\":\"recv_gradient\",\"micro_batch\":0,\"chunk\":0,\"peer\":1,\"start_s\":0.001,\"end_s\":0.003},"
      "{\"kind\":\"backward\",\"micro_batch\":0,\"chunk\":0,\"peer\":-1,\"start_s\":0.003,\"end_s\":0.004}],"
      "[{\"kind\":\"recv_activation\",\"micro_batch\":0,\"chunk\":1,\"peer\":0,\"start_s\":0,\"end_s\":0.001},"
      "{\"kind\":\"forward\",\"micro_batch\":0,\"chunk\":1,\"peer\":-1,\"start_s\":0.001,\"end_s\":0.002},"
      "{\"kind\":\"backward\",\"micro_batch\":0,\"chunk\":1,\"peer\":-1,\"start_s\":0.002,\"end_s\":0.003},"
      "{\"kind\":\"send_gradient\",\"micro_batch\":0,\"chunk\":1,\"peer\":0,\"start_s\":0.003,\"end_s\":0.003}]]}");
  const std::optional<MeasuredPipeline> p = read_pipeline_timeline(path);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 7);
  EXPECT_EQ(p->schedule, "gpipe");
  EXPECT_DOUBLE_EQ(p->simulation.makespan, 4);
  EXPECT_DOUBLE_EQ(p->simulation.busy[0], 2);
  EXPECT_DOUBLE_EQ(p->simulation.busy[1], 2);
  EXPECT_DOUBLE_EQ(p->simulation.mean_bubble, 0.5);
  const RunMetrics m = read_run_metrics(write(run_line(0, false) + step_line(1, "5", 0.5, 1, 0)));
  const std::string html = render_html_report(m, &*p, "pp");
  const size_t at = html.find("<div class=\"timeline\" id=\"pipeline\">");
  ASSERT_NE(at, std::string::npos);
  const std::string timeline = html.substr(at, html.find("</svg>", at) - at);
  EXPECT_NE(timeline.find("Measured pipeline timeline of step 7 (ms): gpipe, pp = 2"), std::string::npos);
  EXPECT_EQ(testing::occurrences(timeline, "stroke=\"white\"><title>"), 4u);  // the compute actions only

  testing::write_bytes(path, "{\"step\":7,\"schedule\":\"gpipe\",\"pp\":2,\"virtual_stages\":1,\"micro_batches\":1,"
                             "\"ranks\":[[{\"kind\":\"sideways\",\"micro_batch\":0,\"chunk\":0,\"peer\":-1,"
                             "\"start_s\":0,\"end_s\":1}],[]]}");
  try {
    read_pipeline_timeline(path);
    ADD_FAILURE() << "an unknown action kind was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pipeline action kind \"sideways\""), std::string::npos) << e.what();
  }
  testing::write_bytes(path, "{\"step\":7");
  try {
    read_pipeline_timeline(path);
    ADD_FAILURE() << "a cut file was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("pipeline timeline \"" + path + "\" is malformed: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace ndt
