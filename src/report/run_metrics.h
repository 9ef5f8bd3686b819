// A run's metrics.jsonl (written by train/trainer.cpp; the records are listed in
// docs/report.md) read into one series per quantity, for the report's charts and its
// summary. The file is a log that may have been cut by a crash, appended to by a
// resumed run, or rewound by a rollback, so reading keeps to these rules:
//   - a step trained twice (after a rollback, or a resume from an earlier checkpoint)
//     keeps its latest record in the series; what happened stays in the events;
//   - a last line without its newline (the run died while writing it) is skipped and
//     said in `skipped`; any other line that is not a JSON object is an error naming
//     the file and the line, as is a value of the wrong type;
//   - non-finite values, which JSON cannot hold and the trainer writes as the strings
//     "nan", "inf" and "-inf", are read as such and kept (charts mark them);
//   - communication counters are cumulative per process, so a step's bytes and wait are
//     the difference from the previous step record of the same process (a "run" record
//     starts a new process; the evaluation between two steps counts in the later one).
#pragma once

#include "report/series.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ndt {


// Something that happened to a step: kind is clip (optim.grad_clip bounded the norm, or
// ZClip), spike (detected, update applied), skip (update skipped), rollback, overflow
// (loss scaling skipped the update), nonfinite (a non-finite loss or norm), resume (a
// resumed part of the run starts after this step) or event (any other intervention).
struct RunEvent {
  int64_t step = 0;
  std::string kind;
  std::string text;
};

struct RunMetrics {
  std::filesystem::path path;
  int lines = 0;  // lines read, skipped ones included
  Series loss, val_loss, lr, grad_norm, step_s, tokens_per_s, mfu, hfu, peak_mem_bytes;
  std::map<std::string, Series> mem_current, mem_peak;  // bytes by ledger tag (params, grads, ...)
  std::map<std::string, Series> comm_bytes, comm_wait_s;  // per step, by mesh axis (rank 0's counters)
  std::vector<RunEvent> events;  // in file order, the first kMaxEventsPerKind of each kind
  std::map<std::string, int64_t> event_counts;  // every event, by kind
  std::vector<nlohmann::json> runs;  // the "run" records' contents, in file order: the latest last
  nlohmann::json summary;  // the last "summary" record's contents; null if the run did not finish
  // parallel.layout = "auto": the "layout_check" records' contents (predicted against
  // measured step time), in file order.
  std::vector<nlohmann::json> layout_checks;
  std::vector<std::string> skipped;  // "line N: why", for each line left out
};

// Events kept of each kind (a long run clips at most of its 200,000 steps): the rest are
// counted in event_counts, and every one is in metrics.jsonl.
inline constexpr int64_t kMaxEventsPerKind = 1000;

// Reads the file line by line (memory holds the series, never the file). Throws
// ndt::Error naming the file (and the line) when it is missing, unreadable, empty or
// malformed as above; a quoted line shows its control characters as \xNN.
RunMetrics read_run_metrics(const std::filesystem::path& file);

// The events of one kind.
std::vector<RunEvent> events_of_kind(const RunMetrics& metrics, const std::string& kind);

}  // namespace ndt
