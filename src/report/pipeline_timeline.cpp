#include "report/pipeline_timeline.h"

#include "core/error.h"
#include "core/input_file.h"
#include "parallel/pipeline/runner.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace ndt {

std::optional<MeasuredPipeline> read_pipeline_timeline(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) return std::nullopt;
  const std::string problem = input_file_problem(file);
  NDT_CHECK(problem.empty(), "pipeline timeline \"{}\" {}", file.string(), problem);
  MeasuredPipeline measured;
  PipelineSimulation& s = measured.simulation;
  try {
    std::ifstream in(file);
    const nlohmann::json j = nlohmann::json::parse(in);
    measured.step = j.at("step").get<int64_t>();
    measured.schedule = j.at("schedule").get<std::string>();
    // The schedule gives the placement, by which the drawing names a rank's chunks;
    // seq_chunks (Seq1F1B) is absent from files written before it.
    s.shape = pipeline_shape(pipeline_schedule_from_name(measured.schedule), j.at("pp").get<int>(),
                             j.at("virtual_stages").get<int>(), j.at("micro_batches").get<int>(),
                             j.value("seq_chunks", 1));
    const nlohmann::json& ranks = j.at("ranks");
    NDT_CHECK(ranks.is_array() && static_cast<int>(ranks.size()) == s.shape.pp,
              "pipeline timeline \"{}\": {} ranks listed for pp = {}", file.string(), ranks.size(), s.shape.pp);
    for (const nlohmann::json& rank : ranks) {
      std::vector<TimedPipelineAction> actions;
      double busy = 0;
      for (const nlohmann::json& a : rank) {
        TimedPipelineAction t;
        t.action = {pipeline_action_kind_from_name(a.at("kind").get<std::string>()), a.at("micro_batch").get<int>(),
                    a.at("chunk").get<int>(), a.at("peer").get<int>(), a.value("seq_chunk", 0)};
        t.start = 1e3 * a.at("start_s").get<double>();
        t.end = 1e3 * a.at("end_s").get<double>();
        if (!is_communication(t.action.kind)) busy += t.end - t.start;
        s.makespan = std::max(s.makespan, t.end);
        actions.push_back(t);
      }
      s.timeline.push_back(std::move(actions));
      s.busy.push_back(busy);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("pipeline timeline \"{}\" is malformed: {}", file.string(), e.what());
  }
  for (double busy : s.busy) s.bubble.push_back(s.makespan > 0 ? (s.makespan - busy) / s.makespan : 0);
  for (double bubble : s.bubble) s.mean_bubble += bubble / static_cast<double>(s.bubble.size());
  s.peak_live_activations.assign(s.timeline.size(), 0);  // not measured
  return measured;
}

}  // namespace ndt
