// `ndtrain report` on a long run (issue 35, class 5): 200,000 steps are drawn downsampled
// (per pixel column the first, last, lowest and highest points: the line and its spikes
// look as with every point, and every drawn value is exact), events are listed up to a
// bound and counted, and the command's memory and page stay small (they were 688 MB and
// 124 MB).
#include "../common/temp_dir.h"
#include "svg_reading.h"
#include "report/html_report.h"
#include "report/run_metrics.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace ndt {
namespace {

constexpr int kSteps = 200000;
constexpr int kSpike = 123457;

// A step's loss: a smooth decay, noise from the step, one spike and one NaN.
double loss_at(int s) {
  if (s == kSpike) return 50.0;
  return 3 + std::exp(-s / 20000.0) + 0.01 * ((s * 7919) % 101);
}

// A run of kSteps steps, every one clipped (grad_norm 1.5 > optim.grad_clip 1), with the
// memory tags and comm axes a real run records.
void write_long_run(const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path);
  out << "{\"run\":{\"start_step\":0,\"resumed\":false,\"config\":{\"optim.grad_clip\":\"1\",\"optim.clip_mode\":"
         "\"\\\"norm\\\"\"}}}\n";
  for (int s = 1; s <= kSteps; ++s) {
    out << "{\"step\":" << s << ",\"loss\":" << (s == 777 ? std::string("\"nan\"") : fmt::format("{}", loss_at(s)))
        << ",\"lr\":0.0006,\"grad_norm\":1.5,\"step_s\":0.1,\"tokens_per_s\":8000,\"mfu\":0.3,\"hfu\":0.3,"
           "\"peak_mem_bytes\":2000000,\"mem\":{";
    for (const char* tag : {"params", "grads", "optimizer", "activations", "comm", "other"}) {
      out << (tag[0] == 'p' && tag[1] == 'a' ? "" : ",") << "\"" << tag << "\":{\"current\":" << 1000 + s
          << ",\"peak\":4000}";
    }
    out << "},\"comm\":{\"dp\":{\"all_reduce\":{\"calls\":" << s << ",\"wire_bytes\":" << 1000.0 * s
        << ",\"wait_s\":0}},\"tp\":{\"all_reduce\":{\"calls\":" << s << ",\"wire_bytes\":" << 10.0 * s
        << ",\"wait_s\":0}}}}\n";
    if (s % 1000 == 0) out << "{\"step\":" << s << ",\"val_loss\":3.5}\n";
  }
}

// The value of attribute `name` in `element`'s first tag, found without std::regex
// (libstdc++'s recursive matcher overflows the stack on attributes of many kilobytes).
std::string long_attribute(const std::string& element, const std::string& name) {
  const std::string tag = element.substr(0, element.find('>'));
  const size_t at = tag.find(" " + name + "=\"");
  if (at == std::string::npos) return "";
  const size_t begin = at + name.size() + 3;
  return tag.substr(begin, tag.find('"', begin) - begin);
}

// Runs the built ndtrain with `args` (output to `log`) and returns its peak resident set
// in bytes (its own, from wait4), or -1 if it did not exit 0.
double peak_rss_of_ndtrain(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_text = {std::string(NDT_BINARY_DIR) + "/ndtrain"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) return -1;
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return static_cast<double>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

// Catches: a long run's report holding the whole file and every point in memory and
// writing every point into the page (688 MB and 124 MB for 200,000 steps), or a
// downsampling that loses a spike or draws values the run did not have.
TEST(LongRunReport, TwoHundredThousandStepsAreDrawnDownsampledWithSpikesAndExactValues) {
  testing::TempDir dir;
  write_long_run(dir.file("run/metrics.jsonl"));
  // The command: memory and page bounded. 24 series of 200,000 (step, value) pairs take
  // 77 MB at 16 bytes a point (twice that while their arrays grow), the program and its
  // libraries a few tens of MB; the page holds about 4 points per pixel column per line.
  const double rss = peak_rss_of_ndtrain({"report", dir.file("run"), "--out", dir.file("report.html")},
                                         dir.file("report.log"));
  ASSERT_GT(rss, 0) << std::ifstream(dir.file("report.log")).rdbuf();
  std::printf("ndtrain report on %d steps: peak RSS %.0f MB, page %.2f MB\n", kSteps, rss / 1e6,
              std::filesystem::file_size(dir.file("report.html")) / 1e6);
  EXPECT_LT(rss, 300e6);
  EXPECT_LT(std::filesystem::file_size(dir.file("report.html")), 4e6);

  const RunMetrics m = read_run_metrics(dir.file("run/metrics.jsonl"));
  EXPECT_EQ(m.loss.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(m.event_counts.at("clip"), kSteps);
  EXPECT_EQ(m.events.size(), static_cast<size_t>(kMaxEventsPerKind));
  const std::string html = render_html_report(m, nullptr, "long");
  EXPECT_NE(html.find("200000 clip events: the first 1000 are listed and marked"), std::string::npos);
  const std::string svg = testing::svg_by_id(html, "loss");
  const std::string group = svg.substr(svg.find("<g class=\"series\" data-series=\"loss\""));
  struct {
    std::vector<double> x, y;
  } loss{testing::numbers(long_attribute(group, "data-x")), testing::numbers(long_attribute(group, "data-y"))};
  ASSERT_EQ(loss.x.size(), loss.y.size());
  const double columns = testing::numbers(long_attribute(svg, "data-plot"))[2];  // the plot's width in px
  EXPECT_LE(loss.x.size(), 5 * static_cast<size_t>(columns) + 5);  // first, last, low, high (+ a non-finite)
  EXPECT_NE(svg.find("data-points=\"" + std::to_string(loss.x.size()) + " of 200000\""), std::string::npos);
  // Every drawn point is a step's exact value; the spike and the NaN are among them.
  bool spike = false, nan = false;
  for (size_t i = 0; i < loss.x.size(); ++i) {
    const int s = static_cast<int>(loss.x[i]);
    ASSERT_EQ(loss.x[i], s);
    if (s == 777) {
      nan = std::isnan(loss.y[i]);
      continue;
    }
    ASSERT_EQ(loss.y[i], loss_at(s)) << "step " << s;
    spike |= s == kSpike;
  }
  EXPECT_TRUE(spike) << "the spike at step " << kSpike << " was not drawn";
  EXPECT_TRUE(nan) << "the non-finite loss at step 777 was not marked";
}

}  // namespace
}  // namespace ndt
