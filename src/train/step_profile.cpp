#include "train/step_profile.h"

#include "comm/device_mesh.h"
#include "core/dtype.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace ndt {

double StepProfile::unaccounted() const {
  return step_seconds - std::accumulate(kernels.begin(), kernels.end(), 0.0) - communication - rank_wait;
}

StepProfile slowest_rank_profile(const StepProfile& local, Communicator& comm) {
  if (comm.size() == 1) return local;
  // In floats, as the communicator reduces them: the maximum is one rank's own value, so
  // that rank finds itself; the chosen rank's figures plus the others' zeros are its own.
  const float kernel_seconds = static_cast<float>(std::accumulate(local.kernels.begin(), local.kernels.end(), 0.0));
  float longest = kernel_seconds;
  comm.all_reduce(&longest, 1, DType::f32, ReduceOp::max);
  float chosen = kernel_seconds == longest ? static_cast<float>(comm.rank()) : static_cast<float>(comm.size());
  comm.all_reduce(&chosen, 1, DType::f32, ReduceOp::min);
  constexpr size_t kClasses = kernels::kNumOpClasses;
  std::vector<float> figures(kClasses + 3, 0.0f);
  if (static_cast<int>(chosen) == comm.rank()) {
    std::copy(local.kernels.begin(), local.kernels.end(), figures.begin());
    figures[kClasses] = static_cast<float>(local.step_seconds);
    figures[kClasses + 1] = static_cast<float>(local.communication);
    figures[kClasses + 2] = static_cast<float>(local.rank_wait);
  }
  comm.all_reduce(figures.data(), figures.size(), DType::f32, ReduceOp::sum);
  StepProfile p;
  p.rank = static_cast<int>(chosen);
  std::copy(figures.begin(), figures.begin() + kClasses, p.kernels.begin());
  p.step_seconds = figures[kClasses];
  p.communication = figures[kClasses + 1];
  p.rank_wait = figures[kClasses + 2];
  return p;
}

StepProfiler::StepProfiler(DeviceMesh& mesh) : exchange_(mesh.world().split(0, mesh.world().rank(), "profile")) {
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
  p.rank = exchange_->rank();
  p.step_seconds = step_seconds;
  const kernels::OpSeconds now = kernels::profile_seconds();
  for (size_t c = 0; c < kernels::kNumOpClasses; ++c) p.kernels[c] = now[c] - kernels_at_begin_[c];
  p.communication = seconds_in(false) - communication_at_begin_;
  p.rank_wait = seconds_in(true) - rank_wait_at_begin_;
  return p;
}

StepProfile StepProfiler::end_slowest(double step_seconds) { return slowest_rank_profile(end(step_seconds), *exchange_); }

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
