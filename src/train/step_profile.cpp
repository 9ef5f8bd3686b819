#include "train/step_profile.h"

#include "comm/device_mesh.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace ndt {

double StepProfile::unaccounted() const {
  return step_seconds - std::accumulate(kernels.begin(), kernels.end(), 0.0) - communication - rank_wait;
}

StepProfiler::StepProfiler(DeviceMesh& mesh) {
  communicators_.push_back(&mesh.world());
  for (size_t a = 0; a < kNumAxes; ++a) {
    const Communicator* comm = &mesh.axis(static_cast<Axis>(a));
    if (std::find(communicators_.begin(), communicators_.end(), comm) == communicators_.end()) {
      communicators_.push_back(comm);
    }
  }
  kernels::set_profiling(true);
}

StepProfiler::~StepProfiler() { kernels::set_profiling(false); }

double communication_seconds(const CommStats& stats) {
  return stats.total_wait_seconds() - stats[CommOp::barrier].wait_seconds + stats.total_progress_seconds();
}

double StepProfiler::seconds_in(bool barriers) const {
  double total = 0;
  for (const Communicator* comm : communicators_) {
    total += barriers ? comm->stats()[CommOp::barrier].wait_seconds : communication_seconds(comm->stats());
  }
  return total;
}

void StepProfiler::begin() {
  kernels_at_begin_ = kernels::profile_seconds();
  communication_at_begin_ = seconds_in(false);
  rank_wait_at_begin_ = seconds_in(true);
}

StepProfile StepProfiler::end(double step_seconds) const {
  StepProfile p;
  p.step_seconds = step_seconds;
  const kernels::OpSeconds now = kernels::profile_seconds();
  for (size_t c = 0; c < kernels::kNumOpClasses; ++c) p.kernels[c] = now[c] - kernels_at_begin_[c];
  p.communication = seconds_in(false) - communication_at_begin_;
  p.rank_wait = seconds_in(true) - rank_wait_at_begin_;
  return p;
}

std::string format_step_profile(const std::vector<StepProfile>& steps, const std::string& indent) {
  NDT_CHECK(!steps.empty(), "format_step_profile: no steps");
  std::vector<const StepProfile*> sorted;
  for (const StepProfile& s : steps) sorted.push_back(&s);
  std::sort(sorted.begin(), sorted.end(),
            [](const StepProfile* a, const StepProfile* b) { return a->step_seconds < b->step_seconds; });
  const StepProfile& p = *sorted[sorted.size() / 2];
  std::string text = fmt::format("{}profile of the median step ({:.3f} s, this rank):\n", indent, p.step_seconds);
  auto line = [&](std::string_view what, double seconds) {
    text += fmt::format("{}  {:<34} {:8.3f} s {:6.1f}%\n", indent, what, seconds, 100.0 * seconds / p.step_seconds);
  };
  for (size_t c = 0; c < kernels::kNumOpClasses; ++c) {
    const auto op_class = static_cast<kernels::OpClass>(c);
    if (op_class != kernels::OpClass::untimed) line(kernels::op_class_name(op_class), p.kernels[c]);
  }
  line("communication", p.communication);
  line("waiting for other ranks (barriers)", p.rank_wait);
  line("unaccounted (outside the timers)", p.unaccounted());
  return text;
}

}  // namespace ndt
