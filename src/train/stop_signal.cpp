#include "train/stop_signal.h"

#include "comm/watchdog.h"

#include <atomic>
#include <csignal>

namespace ndt {

namespace {

std::atomic<int> g_signal{0};

void on_stop_signal(int signal) {
  note_stop_signal(signal);  // the watchdog says what a wait in progress was for
  int none = 0;
  if (g_signal.compare_exchange_strong(none, signal)) return;
  if (signal == SIGINT) {  // Ctrl-C again: the default action, now
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

}  // namespace

void install_stop_handler() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

int stop_signal() { return g_signal.load(); }
bool stop_requested() { return stop_signal() != 0; }
void clear_stop_request() { g_signal.store(0); }

const char* stop_signal_name(int signal) { return signal == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace ndt
