// The watchdog behind CommWaitGuard (see watchdog.h): a registry of the waits in
// progress and one detached thread that checks their deadlines every 50 ms. The
// registry is allocated once and never freed, so the thread can outlive static
// destruction at process exit without touching destroyed objects.
#include "comm/watchdog.h"

#include "core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace ndt {

struct WatchdogAccess {
  static const CommWaitGuard* expired(const std::vector<const CommWaitGuard*>& active,
                                      std::chrono::steady_clock::time_point now) {
    for (const CommWaitGuard* g : active) {
      if (now >= g->deadline_) return g;
    }
    return nullptr;
  }
  static std::string message(const CommWaitGuard& g, int rank) {
    return comm_timeout_message(rank, g.op_, g.axis_, g.bytes_, g.dtype_, g.timeout_seconds_, g.step_, g.peers_);
  }
  static std::string stopped_message(const CommWaitGuard& g, int rank, int signal) {
    return fmt::format("ndtrain: rank {}: stopped by signal {} while {} on mesh axis \"{}\" waited{}{}", rank, signal,
                       comm_op_name(g.op_), g.axis_, g.step_ >= 0 ? fmt::format(" at step {}", g.step_) : "",
                       unreachable_peers_note(g.peers_));
  }
};

namespace {

std::atomic<double> g_timeout_seconds{300.0};
std::atomic<int> g_log_rank{-1};
std::atomic<int> g_stop_signal{0};  // note_stop_signal's; -1 once reported

struct Registry {
  std::mutex mutex;
  std::vector<const CommWaitGuard*> active;
  std::once_flag started;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the watchdog thread may outlive statics
  return *r;
}

[[noreturn]] void abort_job(const std::string& message) {
  // stdout may hold the last log lines; flush it unless another thread holds its lock.
  if (ftrylockfile(stdout) == 0) {
    std::fflush(stdout);
    funlockfile(stdout);
  }
  const std::string line = message + "\n";
  // write(2) directly: unbuffered, and no stdio lock that a blocked thread might hold.
  [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  _exit(kCommTimeoutExitCode);
}

void print_line(const std::string& message) {
  const std::string line = message + "\n";
  [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
}

void watchdog_loop() {
  Registry& r = registry();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string message, stopped;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      if (const CommWaitGuard* g = WatchdogAccess::expired(r.active, std::chrono::steady_clock::now())) {
        message = WatchdogAccess::message(*g, g_log_rank.load());
      }
      int signal = g_stop_signal.load();
      if (signal > 0 && !r.active.empty() && g_stop_signal.compare_exchange_strong(signal, -1)) {
        stopped = WatchdogAccess::stopped_message(*r.active.front(), g_log_rank.load(), signal);
      }
    }
    if (!stopped.empty()) print_line(stopped);
    if (!message.empty()) abort_job(message);
  }
}

}  // namespace

void set_comm_timeout_seconds(double seconds) {
  NDT_CHECK(std::isfinite(seconds) && seconds > 0,
            "communication timeout {} s must be a positive, finite number of seconds", seconds);
  g_timeout_seconds.store(seconds);
}

double comm_timeout_seconds() { return g_timeout_seconds.load(); }

void set_comm_log_rank(int rank) { g_log_rank.store(rank); }

void note_stop_signal(int signal) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (int64_t{1} << 20)) return fmt::format("{:.1f} KiB", b / 1024);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  return fmt::format("{:.1f} GiB", b / (1 << 30));
}

std::string unreachable_peers_note(std::string_view peers) {
  if (peers.empty()) return "";
  return fmt::format("; it waits on {}, which a lost host or a cut link leaves unreachable", peers);
}

std::string comm_timeout_message(int rank, CommOp op, std::string_view axis, int64_t bytes, DType dtype,
                                 double timeout_seconds, int64_t step, std::string_view peers) {
  std::string who = rank >= 0 ? fmt::format("rank {}", rank) : std::string("rank ?");
  std::string what = op == CommOp::barrier
                         ? fmt::format("{} on mesh axis \"{}\"", comm_op_name(op), axis)
                         : fmt::format("{} on mesh axis \"{}\" ({}, {})", comm_op_name(op), axis,
                                       format_bytes(bytes), dtype_name(dtype));
  std::string when = step >= 0 ? fmt::format(" at step {}", step) : std::string();
  return fmt::format("ndtrain: {}: {} did not complete within {:g} s{}{}; aborting the job", who, what,
                     timeout_seconds, when, unreachable_peers_note(peers));
}

CommWaitGuard::CommWaitGuard(CommOp op, std::string_view axis, int64_t bytes, DType dtype, std::string_view peers)
    : op_(op), axis_(axis), peers_(peers), bytes_(bytes), dtype_(dtype), step_(comm_step()),
      timeout_seconds_(g_timeout_seconds.load()) {
  // Clamp so that huge timeouts cannot overflow the clock's representation (~30 years).
  const double seconds = std::min(timeout_seconds_, 1e9);
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  Registry& r = registry();
  std::call_once(r.started, [] { std::thread(watchdog_loop).detach(); });
  std::lock_guard<std::mutex> lock(r.mutex);
  r.active.push_back(this);
}

CommWaitGuard::~CommWaitGuard() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = std::find(r.active.begin(), r.active.end(), this);
  if (it != r.active.end()) r.active.erase(it);
}

}  // namespace ndt
