// What a run prints (rank 0): the header before step 1 (the model, data, batch, mesh,
// precision, each parallel axis, the predicted memory and, with offload, its disk tier
// and I/O per step, the MFU peak), one progress
// line per train.log_every steps, a line per stability event and validation, and the
// summary at the end. Text for people: programs read metrics.jsonl
// (train/metrics_writer.h). A log built with a null stream prints nothing.
#pragma once

#include "comm/device_mesh.h"
#include "train/config.h"
#include "train/peak_flops.h"
#include "train/step_stats.h"
#include "train/training_data.h"
#include "train/training_model.h"

#include <cstdint>
#include <ostream>
#include <string>

namespace ndt {

class RunLog {
 public:
  RunLog(std::ostream* out, const RunConfig& config) : out_(out), config_(config) {}
  bool on() const { return out_ != nullptr; }

  void header(const TrainingModel& model, DeviceMesh& mesh, const TrainingData& data, const PeakFlops& peak);
  void step(const StepStats& s);
  // A step's events: each intervention (as one line) and an overflow.
  void events(const StepStats& s);
  void validation(int64_t steps_done, double loss);
  // Any other line ("resumed from ...", "stop requested ...").
  void line(const std::string& text);
  void summary(const RunSummary& summary, DeviceMesh& mesh, const TrainingModel& model, int64_t skipped_batches);

 private:
  void model_and_data(const TrainingModel& model, const TrainingData& data);
  void batch_and_mesh(const TrainingModel& model, DeviceMesh& mesh);
  void precision(const TrainingModel& model);
  void axes(const TrainingModel& model, DeviceMesh& mesh);
  void mixture_of_experts(const TrainingModel& model, DeviceMesh& mesh);
  void predicted_memory(const TrainingModel& model, DeviceMesh& mesh);
  // offload.*: what is on disk and where, the predicted resident peak, disk and I/O per step.
  void offload(const std::vector<ParameterSpec>& specs, DeviceMesh& mesh, int64_t activations);
  void throughput_and_memory(const RunSummary& summary, DeviceMesh& mesh, const TrainingModel& model);
  void stability(const RunSummary& summary, int64_t skipped_batches);
  bool recomputes(const TrainingModel& model) const;

  std::ostream* out_;
  const RunConfig& config_;
  bool hfu_ = false;  // the step line shows HFU (something recomputes)
};

}  // namespace ndt
