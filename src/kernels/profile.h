// Kernel time per op class (kernels/op_class.h), for `ndtrain bench train --profile`:
// wall-clock scoped timers at the dispatch seam (kernels.h's Routed times every routed
// call) and wherever a caller marks a group of calls with a ProfileScope (model/matmul.cpp
// marks fp8 linears). Off unless set_profiling(true); off, a routed call pays one relaxed
// atomic load and a predicted branch.
//
// Only the outermost scope on a thread records: kernels called inside a ProfileScope
// count to the scope's class, so no time is counted twice. Times are wall time of the
// calling thread and include the OpenMP threads' barrier waits inside each kernel. The
// training step calls kernels from one thread; kernels called from several threads at
// once would add up to more than the wall time.
#pragma once

#include "kernels/op_class.h"

#include <array>
#include <atomic>
#include <chrono>

namespace ndt::kernels {

// Seconds per op class, indexed by OpClass.
using OpSeconds = std::array<double, kNumOpClasses>;

namespace detail {
extern std::atomic<bool> g_profiling;
}  // namespace detail

inline bool profiling() { return detail::g_profiling.load(std::memory_order_relaxed); }
void set_profiling(bool on);
// Seconds recorded per class since the process started (differences give a step's).
OpSeconds profile_seconds();

// Times its lifetime into op_class when profiling and when no other scope is open on
// this thread; otherwise does nothing.
class ProfileScope {
 public:
  explicit ProfileScope(OpClass op_class);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  OpClass op_class_;
  bool counted_ = false;     // took part in the nesting count
  bool outermost_ = false;   // records on destruction
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ndt::kernels
