// `ndtrain report` on real runs: a 2-rank data-parallel run with validation that is then
// resumed, and a 2-rank pipeline run. The HTML's charts must hold exactly the values of
// metrics.jsonl (and their pixels the mapping of report/svg_chart.h), the pipeline's
// measured timeline every action that ran; the page must be well-formed XML (xmllint)
// and load in headless Chromium without console errors (skipped, and said, when
// Chromium is not installed: scripts/setup.sh installs it).
#include "../common/command.h"
#include "../common/temp_dir.h"
#include "../train/test_support.h"
#include "svg_reading.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::series_of;
using testing::svg_by_id;

using Result = testing::CommandResult;
Result run(const std::string& command) { return testing::run_command(command); }

std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

const std::string kNdtrain = std::string(NDT_BINARY_DIR) + "/ndtrain";

// The runs, made once for all tests of the suite (about 10 s on 2 cores).
class ReportLaunch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    write_shard(dir_->file("train.bin"), testing::synthetic_text(40000, 5));
    write_shard(dir_->file("val.bin"), testing::synthetic_text(8000, 6));
    std::ofstream(dir_->file("run.toml"))
        << "[model]\npreset = \"gpt2-tiny\"\nn_layer = 2\nd_model = 32\nd_ff = 128\nmax_seq_len = 32\n"
        << "[train]\nsteps = 3\nbatch_size = 8\nmicro_batch_size = 2\nseq_len = 32\neval_every = 2\neval_batches = 1\n"
        << "[sample]\ntokens = 0\n[runtime]\npeak_gflops = 100\ncomm_timeout_s = 60\n"
        << "[data]\ntrain = \"" << dir_->file("train.bin") << "\"\nval = \"" << dir_->file("val.bin") << "\"\n";
    const std::string mpirun = std::string(NDT_MPIRUN) +
                               " -np 2 --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1 " +
                               kNdtrain + " train " + dir_->file("run.toml") + " ";
    // Data parallel: 3 steps, then resumed to 5.
    trained_ = new std::string();
    for (const std::string& args : {"--set runtime.out_dir=" + dir_->file("dp"),
                                    "--set runtime.out_dir=" + dir_->file("dp") + " --set train.steps=5 --resume"}) {
      const Result r = run(mpirun + args);
      if (r.exit_code != 0) *trained_ += "dp run failed: " + r.output;
    }
    const Result pp = run(mpirun + "--set parallel.pp=2 --set runtime.out_dir=" + dir_->file("pp"));
    if (pp.exit_code != 0) *trained_ += "pp run failed: " + pp.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete trained_;
  }
  void SetUp() override { ASSERT_TRUE(trained_->empty()) << *trained_; }

  // `ndtrain report` on a run folder; its HTML.
  static std::string report(const std::string& run, Result* result = nullptr) {
    const Result r = run_report(run);
    if (result) *result = r;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::read_bytes(dir_->file(run + "/report.html"));
  }
  static Result run_report(const std::string& run) { return ::ndt::run(kNdtrain + " report " + dir_->file(run)); }

  static testing::TempDir* dir_;
  static std::string* trained_;  // empty: every run succeeded
};
testing::TempDir* ReportLaunch::dir_ = nullptr;
std::string* ReportLaunch::trained_ = nullptr;

// Checks that the chart `id`'s series `name` holds exactly `expected` (step -> value)
// and draws each point where the chart's mapping puts it.
void expect_series(const std::string& html, const std::string& id, const std::string& name,
                   const std::map<int64_t, double>& expected) {
  const std::string svg = svg_by_id(html, id);
  ASSERT_FALSE(svg.empty()) << "no chart " << id;
  const testing::SvgSeries s = series_of(svg, name);
  ASSERT_TRUE(s.found) << id << ": no series " << name;
  std::vector<double> x, y;
  for (const auto& [step, value] : expected) x.push_back(static_cast<double>(step)), y.push_back(value);
  EXPECT_EQ(s.x, x) << id << "/" << name;
  EXPECT_EQ(s.y, y) << id << "/" << name;
  const std::vector<double> plot = testing::numbers(testing::attribute(svg, "data-plot"));
  const std::vector<double> xr = testing::numbers(testing::attribute(svg, "data-x-range"));
  const std::vector<double> yr = testing::numbers(testing::attribute(svg, "data-y-range"));
  std::vector<std::pair<double, double>> drawn;
  for (const auto& polyline : s.polylines) drawn.insert(drawn.end(), polyline.begin(), polyline.end());
  if (x.size() < 2) return;  // a lone point is a dot
  ASSERT_EQ(drawn.size(), x.size()) << id << "/" << name;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(drawn[i].first, plot[0] + (x[i] - xr[0]) / (xr[1] - xr[0]) * plot[2], 0.006) << id << " " << i;
    EXPECT_NEAR(drawn[i].second, plot[1] + (yr[1] - y[i]) / (yr[1] - yr[0]) * plot[3], 0.006) << id << " " << i;
  }
}

// Catches: a chart whose data are not the run's (wrong record, scale or step, comm not
// per step), the new run and mem records missing, a resume not marked.
TEST_F(ReportLaunch, ChartsHoldTheMetricsOfAResumedDataParallelRun) {
  Result r;
  const std::string html = report("dp", &r);
  EXPECT_NE(r.output.find("steps: 5 (last 5), in 2 parts (resumed 1 times)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("report written to " + dir_->file("dp/report.html")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communication on dp (rank 0, to the last step): "), std::string::npos) << r.output;

  std::map<int64_t, double> loss, val, lr, norm, tokens, mfu, params, activations_peak, dp_bytes;
  double before = 0;
  int runs = 0;
  for (const nlohmann::json& rec : records(dir_->file("dp/metrics.jsonl"))) {
    if (rec.contains("run")) {
      ++runs, before = 0;
      EXPECT_EQ(rec["run"]["world_size"], 2);
      EXPECT_EQ(rec["run"]["mesh"]["dp_replicate"], 2);
      EXPECT_EQ(rec["run"]["config"]["model.n_layer"], "2");
      EXPECT_EQ(rec["run"]["config"]["data.val"], fmt::format("\"{}\"", dir_->file("val.bin")));
      EXPECT_EQ(rec["run"]["peak_flops_source"], "config runtime.peak_gflops");
      EXPECT_EQ(rec["run"]["resumed"], runs == 2);
      EXPECT_EQ(rec["run"]["start_step"], runs == 2 ? 3 : 0);
    }
    if (rec.contains("val_loss")) val[rec["step"]] = rec["val_loss"];
    if (!rec.contains("loss")) continue;
    const int64_t s = rec["step"];
    loss[s] = rec["loss"], lr[s] = rec["lr"], norm[s] = rec["grad_norm"], tokens[s] = rec["tokens_per_s"];
    mfu[s] = rec["mfu"].get<double>() * 100;
    ASSERT_TRUE(rec.contains("mem")) << rec.dump();
    params[s] = rec["mem"]["params"]["current"].get<double>() * (1.0 / (1024 * 1024));
    activations_peak[s] = rec["mem"]["activations"]["peak"].get<double>() * (1.0 / (1024 * 1024));
    EXPECT_GT(rec["mem"]["params"]["current"].get<double>(), 0);
    double bytes = 0;
    for (const auto& [op, c] : rec["comm"]["dp"].items()) bytes += c["wire_bytes"].get<double>();
    dp_bytes[s] = (bytes - before) * (1.0 / (1024 * 1024));
    before = bytes;
  }
  EXPECT_EQ(runs, 2);
  ASSERT_EQ(loss.size(), 5u);
  EXPECT_EQ(val.size(), 4u);  // every 2 steps and at the end of each part: 2, 3, 4, 5
  expect_series(html, "loss", "loss", loss);
  expect_series(html, "loss", "val_loss", val);
  expect_series(html, "lr", "lr", lr);
  expect_series(html, "grad_norm", "grad_norm", norm);
  expect_series(html, "tokens_per_s", "tokens_per_s", tokens);
  expect_series(html, "mfu", "MFU", mfu);
  expect_series(html, "mem_current", "params", params);
  expect_series(html, "mem_peak", "activations", activations_peak);
  expect_series(html, "comm_bytes", "dp", dp_bytes);
  // The resume after step 3, on every chart.
  for (const char* id : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem_current", "comm_bytes"}) {
    EXPECT_NE(svg_by_id(html, id).find("class=\"marker\" data-kind=\"resume\" data-x=\"3\""), std::string::npos) << id;
  }
  EXPECT_NE(html.find("<th>parallel.pp_schedule</th><td>&quot;1f1b&quot;</td>"), std::string::npos);
  EXPECT_EQ(html.find("id=\"pipeline\""), std::string::npos);  // no pipeline, no timeline
}

// Catches: the measured timeline missing a rank or an action, or not drawn.
TEST_F(ReportLaunch, PipelineRunShowsItsMeasuredTimeline) {
  const std::vector<nlohmann::json> recs = records(dir_->file("pp/metrics.jsonl"));
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.front()["run"]["mesh"]["pp"], 2);
  std::ifstream in(dir_->file("pp/pipeline_timeline.json"));
  ASSERT_TRUE(in.good()) << "no pipeline_timeline.json";
  const nlohmann::json timeline = nlohmann::json::parse(in);
  EXPECT_EQ(timeline["step"], 3);
  EXPECT_EQ(timeline["schedule"], "1f1b");
  ASSERT_EQ(timeline["ranks"].size(), 2u);
  size_t compute = 0;
  for (const nlohmann::json& rank : timeline["ranks"]) {
    size_t forwards = 0, backwards = 0;
    double last_end = 0;
    for (const nlohmann::json& a : rank) {
      forwards += a["kind"] == "forward", backwards += a["kind"] == "backward";
      EXPECT_GE(a["start_s"].get<double>(), last_end - 1e-6) << a.dump();  // in order, not overlapping
      EXPECT_GE(a["end_s"].get<double>(), a["start_s"].get<double>()) << a.dump();
      last_end = a["end_s"];
    }
    EXPECT_EQ(forwards, 4u);  // m = 8 rows / 2 per micro-batch
    EXPECT_EQ(backwards, 4u);
    compute += forwards + backwards;
  }
  Result r;
  const std::string html = report("pp", &r);
  EXPECT_NE(r.output.find("pipeline: measured timeline of step 3"), std::string::npos) << r.output;
  const size_t at = html.find("<div class=\"timeline\" id=\"pipeline\">");
  ASSERT_NE(at, std::string::npos);
  const std::string svg = html.substr(at, html.find("</svg>", at) - at);
  EXPECT_NE(svg.find("Measured pipeline timeline of step 3 (ms): 1f1b, pp = 2, v = 1, m = 4"), std::string::npos);
  EXPECT_EQ(testing::occurrences(svg, "stroke=\"white\"><title>"), compute);
}

// Catches: a page a browser or an XML parser would reject (unescaped text, unclosed
// tags), and a report that overwrites nothing or writes nowhere when asked.
TEST_F(ReportLaunch, TheHtmlIsWellFormedXml) {
  for (const std::string run : {"dp", "pp"}) {
    report(run);
    const std::string path = dir_->file(run + "/report.html");
    const Result whole = ::ndt::run("/usr/bin/xmllint --noout " + path);
    EXPECT_EQ(whole.exit_code, 0) << run << ": " << whole.output;
    EXPECT_TRUE(whole.output.empty()) << whole.output;
  }
  const Result elsewhere = ::ndt::run(kNdtrain + " report " + dir_->file("dp") + " --out " + dir_->file("x/r.html"));
  EXPECT_NE(elsewhere.exit_code, 0);  // the folder x does not exist
  const Result out = ::ndt::run(kNdtrain + " report " + dir_->file("dp") + " --out " + dir_->file("r.html"));
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(testing::read_bytes(dir_->file("r.html")), testing::read_bytes(dir_->file("dp/report.html")));
}

// Catches: bad input through the CLI without the file named, or with a zero exit.
TEST_F(ReportLaunch, BadRunFoldersAreNamed) {
  const Result missing = run_report("absent");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("run folder \"" + dir_->file("absent") + "\" does not exist"), std::string::npos)
      << missing.output;
  std::filesystem::create_directories(dir_->file("empty"));
  const Result no_metrics = run_report("empty");
  EXPECT_NE(no_metrics.exit_code, 0);
  EXPECT_NE(no_metrics.output.find("metrics file \"" + dir_->file("empty/metrics.jsonl") + "\" does not exist"),
            std::string::npos)
      << no_metrics.output;
  // A crashed run: its last record cut.
  std::filesystem::create_directories(dir_->file("cut"));
  std::string text = testing::read_bytes(dir_->file("dp/metrics.jsonl"));
  text = text.substr(0, text.rfind("{\"summary\"") + 30);
  testing::write_bytes(dir_->file("cut/metrics.jsonl"), text);
  const Result cut = run_report("cut");
  EXPECT_EQ(cut.exit_code, 0) << cut.output;
  EXPECT_NE(cut.output.find("cut short (the run stopped while writing it), skipped"), std::string::npos)
      << cut.output;
}

// Catches: a page that a browser shows with script errors or without its charts.
TEST_F(ReportLaunch, LoadsInHeadlessChromium) {
  const std::string browser = "/usr/bin/chromium";
  if (!std::filesystem::exists(browser)) {
    GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it): the browser check is skipped; "
                    "TheHtmlIsWellFormedXml still checks the page as XML";
  }
  for (const std::string run : {"dp", "pp"}) {
    report(run);
    const std::string profile = dir_->file("chromium-" + run);
    const Result r = ::ndt::run("timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --no-first-run " +
                                "--user-data-dir=" + profile + " --enable-logging=stderr --v=0 --dump-dom file://" +
                                dir_->file(run + "/report.html"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // The DOM the browser built from the page holds every chart.
    for (const char* id : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem_current", "mem_peak",
                           "comm_bytes", "comm_wait"}) {
      EXPECT_NE(r.output.find(std::string("id=\"") + id + "\""), std::string::npos) << run << ": " << id;
    }
    if (run == "pp") {
      EXPECT_NE(r.output.find("id=\"pipeline\""), std::string::npos);
    }
    EXPECT_EQ(r.output.find("Uncaught"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("CONSOLE"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace ndt
