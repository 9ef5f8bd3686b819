// `ndtrain report RUN_DIR`: the run's metrics.jsonl (and pipeline_timeline.json, for a
// pipeline run) as one self-contained HTML page of charts (src/report/), and its digest
// on the terminal.
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timing.h"
#include "report/html_report.h"
#include "report/run_summary.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

namespace ndt {

int run_report(const ReportOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path dir(o.run_dir);
  NDT_CHECK(std::filesystem::exists(dir), "run folder \"{}\" does not exist", dir.string());
  NDT_CHECK(std::filesystem::is_directory(dir), "run folder \"{}\" is not a folder", dir.string());
  const RunMetrics metrics = read_run_metrics(dir / "metrics.jsonl");
  const std::optional<MeasuredPipeline> pipeline = read_pipeline_timeline(dir / "pipeline_timeline.json");
  const std::string html = render_html_report(metrics, pipeline ? &*pipeline : nullptr, dir.string());
  const std::filesystem::path out = o.out.empty() ? dir / "report.html" : std::filesystem::path(o.out);
  AtomicFile file(out);
  file.write(html.data(), html.size());
  file.commit();

  fmt::print("{}", format_run_digest(digest_run(metrics)));
  for (const std::string& s : metrics.skipped) fmt::print("skipped {} of {}\n", s, metrics.path.string());
  if (pipeline) fmt::print("pipeline: measured timeline of step {}\n", pipeline->step);
  fmt::print("report written to {} ({:.0f} KiB, {:.2f} s)\n", out.string(), static_cast<double>(html.size()) / 1024,
             seconds_since(t0));
  return 0;
}

}  // namespace ndt
