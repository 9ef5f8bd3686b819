// Running a shell command from a test: its exit code, its stdout and stderr together,
// and how long it took (the CLI tests launch `ndtrain` and `mpirun` this way).
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace ndt::testing {

struct CommandResult {
  int exit_code = -1;  // 128: did not exit normally (a signal)
  std::string output;
  double seconds = 0;
};

inline CommandResult run_command(const std::string& command) {
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ndt::testing
