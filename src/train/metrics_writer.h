// Every record of a run's metrics.jsonl (docs/report.md), and pipeline_timeline.json:
// the keys are written here and nowhere else. Records: "run" when a run (or a resumed
// part of it) starts; one per step; one per event of a step, with its kind (what
// `ndtrain report` charts: train/step_stats.h's EventKind, never the wording);
// validation losses; the summary at the end. Only the job's rank 0 writes; a writer
// built with an empty path writes nothing.
//
// A failed write (disk full, I/O error, the file taken away) does not throw: the first
// failure is kept (failure()), later records are dropped, and the trainer saves the
// state and stops the run naming the file and the reason, so a run never goes on, or
// exits 0, with its metrics silently cut.
#pragma once

#include "comm/device_mesh.h"
#include "parallel/pipeline/runner.h"
#include "train/config.h"
#include "train/layout_check.h"
#include "train/metrics.h"
#include "train/peak_flops.h"
#include "train/step_stats.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ndt {

class MetricsWriter {
 public:
  // path empty: nothing is written. append: a resumed run keeps the records there.
  MetricsWriter(const std::string& path, bool append);

  // The record opening a run (and each resumed part of it): the resolved config, the
  // mesh, the model's size and the MFU peak.
  void run(const RunConfig& config, const MeshShape& mesh, int world_size, int64_t start_step, const PeakFlops& peak);
  // A step's record and one record per event of it. With several ranks, the step record
  // carries rank 0's cumulative communication counters on `mesh`.
  void step(const StepStats& s, const RunConfig& config, DeviceMesh& mesh, const PipelineRunner* pipeline);
  void validation(int64_t steps_done, double loss);
  // parallel.layout = "auto": the chosen layout's predicted and measured step time, after step `step`.
  void layout_check(const LayoutCheckResult& check, int64_t step);
  void summary(const RunSummary& summary, DeviceMesh& mesh);
  // pipeline_timeline.json in out_dir: every pp rank's measured actions of the last step
  // (gathered by the caller: PipelineRunner::gather_last_step_timeline).
  static void pipeline_timeline(const std::string& out_dir, const std::vector<std::vector<TimedPipelineAction>>& ranks,
                                int64_t step, const RunConfig& config, const PipelineShape& shape);

  // The first failed write, naming the file and the reason; nothing while all went well.
  const std::optional<std::string>& failure() const { return failure_; }
  const std::string& path() const { return path_; }

 private:
  void write(const nlohmann::json& record);

  std::string path_;
  std::unique_ptr<MetricsLog> log_;
  std::optional<std::string> failure_;
};

// The communicators a run's metrics and summary report, each once (the flattenings that
// are another axis's communicator when cp = 1 or ep = 1 are left out).
std::vector<Axis> reported_axes(const MeshShape& mesh);

}  // namespace ndt
