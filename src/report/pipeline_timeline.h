// A pipeline run's measured timeline: RUN_DIR/pipeline_timeline.json, which the trainer
// writes after the last step (every pp rank's actions of that step, each rank's times
// from its own start of the step; train/trainer.cpp, docs/report.md), read into the
// simulator's PipelineSimulation so that parallel/pipeline/simulator.h's renderer draws
// what ran, in milliseconds, as it draws what a schedule predicts.
#pragma once

#include "parallel/pipeline/simulator.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace ndt {

struct MeasuredPipeline {
  int64_t step = 0;
  std::string schedule;
  PipelineSimulation simulation;  // times in ms; busy and bubble from the measured compute actions
};

// nullopt when the file does not exist (a run without pipeline parallelism); throws
// ndt::Error naming the file and what is wrong when it is there but malformed.
std::optional<MeasuredPipeline> read_pipeline_timeline(const std::filesystem::path& file);

}  // namespace ndt
