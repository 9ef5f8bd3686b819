#include "kernels/profile.h"

namespace ndt::kernels {

std::atomic<bool> detail::g_profiling{false};

namespace {

std::array<std::atomic<int64_t>, kNumOpClasses> g_nanoseconds{};
thread_local int t_open_scopes = 0;

}  // namespace

void set_profiling(bool on) { detail::g_profiling.store(on, std::memory_order_relaxed); }

OpSeconds profile_seconds() {
  OpSeconds seconds{};
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    seconds[c] = static_cast<double>(g_nanoseconds[c].load(std::memory_order_relaxed)) * 1e-9;
  }
  return seconds;
}

ProfileScope::ProfileScope(OpClass op_class) : op_class_(op_class) {
  if (!profiling() || op_class == OpClass::untimed) return;
  counted_ = true;
  outermost_ = t_open_scopes++ == 0;
  if (outermost_) start_ = std::chrono::steady_clock::now();
}

ProfileScope::~ProfileScope() {
  if (!counted_) return;
  --t_open_scopes;
  if (!outermost_) return;
  const auto elapsed = std::chrono::steady_clock::now() - start_;
  g_nanoseconds[static_cast<size_t>(op_class_)].fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count(), std::memory_order_relaxed);
}

}  // namespace ndt::kernels
