// The numbers a reader wants first from a run, taken from its metrics
// (report/run_metrics.h): printed by `ndtrain report` and shown at the top of the HTML.
#pragma once

#include "report/run_metrics.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ndt {

struct RunDigest {
  int64_t steps = 0;  // distinct steps with a record
  int64_t last_step = 0;
  std::optional<double> final_loss, best_loss, final_val_loss, best_val_loss;  // best: the lowest finite
  int64_t best_loss_step = 0, best_val_loss_step = 0;
  // Medians over the steps after the first (which pays for first-touch page faults, as
  // the trainer's summary leaves it out), or over the one step there is.
  double median_tokens_per_s = 0, median_mfu = 0;
  std::optional<double> median_hfu;
  double peak_mem_bytes = 0;
  std::map<std::string, int> events;                     // count by kind
  std::map<std::string, double> comm_bytes, comm_wait_s;  // whole run, by mesh axis
  int parts = 0;  // run records: 1 + the resumes (0 for a file written before they existed)
};

RunDigest digest_run(const RunMetrics& metrics);

// Lines for the terminal (and the report's header), ending in a newline.
std::string format_run_digest(const RunDigest& digest);

}  // namespace ndt
