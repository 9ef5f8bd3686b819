#include "report/run_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ndt {

namespace {

double median_after_first(const Series& series) {
  std::vector<double> values;
  for (auto it = series.begin(); it != series.end(); ++it) {
    if ((it != series.begin() || series.size() == 1) && std::isfinite(it->second)) values.push_back(it->second);
  }
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The last value and the lowest finite one with its step.
void final_and_best(const Series& series, std::optional<double>& final, std::optional<double>& best, int64_t& at) {
  if (series.empty()) return;
  final = series.back().second;
  for (const auto& [step, value] : series) {
    if (std::isfinite(value) && (!best || value < *best)) best = value, at = step;
  }
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

std::string loss_text(const std::optional<double>& final, const std::optional<double>& best, int64_t at) {
  if (!final) return "none";
  return fmt::format("final {:.4f}, best {} (step {})", *final, best ? fmt::format("{:.4f}", *best) : "none", at);
}

}  // namespace

RunDigest digest_run(const RunMetrics& m) {
  RunDigest d;
  d.steps = static_cast<int64_t>(m.loss.size());
  d.last_step = m.loss.empty() ? 0 : m.loss.back().first;
  final_and_best(m.loss, d.final_loss, d.best_loss, d.best_loss_step);
  final_and_best(m.val_loss, d.final_val_loss, d.best_val_loss, d.best_val_loss_step);
  d.median_tokens_per_s = median_after_first(m.tokens_per_s);
  d.median_mfu = median_after_first(m.mfu);
  if (!m.hfu.empty()) d.median_hfu = median_after_first(m.hfu);
  for (const auto& [step, bytes] : m.peak_mem_bytes) d.peak_mem_bytes = std::max(d.peak_mem_bytes, bytes);
  for (const auto& [kind, count] : m.event_counts) d.events[kind] = static_cast<int>(count);
  for (const auto& [axis, series] : m.comm_bytes) {
    for (const auto& [step, bytes] : series) d.comm_bytes[axis] += bytes;
  }
  for (const auto& [axis, series] : m.comm_wait_s) {
    for (const auto& [step, seconds] : series) d.comm_wait_s[axis] += seconds;
  }
  d.parts = static_cast<int>(m.runs.size());
  return d;
}

std::string format_run_digest(const RunDigest& d) {
  std::string out = fmt::format("steps: {} (last {}){}\n", d.steps, d.last_step,
                                d.parts > 1 ? fmt::format(", in {} parts (resumed {} times)", d.parts, d.parts - 1) : "");
  out += fmt::format("loss: {}\n", loss_text(d.final_loss, d.best_loss, d.best_loss_step));
  out += fmt::format("validation loss: {}\n", loss_text(d.final_val_loss, d.best_val_loss, d.best_val_loss_step));
  out += fmt::format("throughput: median {:.0f} tokens/s, MFU {:.1f}%{}\n", d.median_tokens_per_s,
                     100 * d.median_mfu, d.median_hfu ? fmt::format(", HFU {:.1f}%", 100 * *d.median_hfu) : "");
  out += fmt::format("peak memory (ledger, rank 0): {}\n", mib(d.peak_mem_bytes));
  std::string events;
  int total = 0;
  for (const auto& [kind, count] : d.events) events += fmt::format(", {} {}", count, kind), total += count;
  out += fmt::format("events: {}{}\n", total, total > 0 ? " (" + events.substr(2) + ")" : "");
  for (const auto& [axis, bytes] : d.comm_bytes) {
    out += fmt::format("communication on {} (rank 0, to the last step): {} sent, {:.2f} s waiting\n", axis, mib(bytes),
                       d.comm_wait_s.count(axis) ? d.comm_wait_s.at(axis) : 0.0);
  }
  return out;
}

}  // namespace ndt
