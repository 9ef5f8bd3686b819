#include "plan/run_command.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string_view>

namespace ndt {

std::string shell_quoted(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string this_binary_on_ranks(int ranks) {
  // /proc/self/exe names the binary of whoever opens it: resolve it here. The kernel
  // appends " (deleted)" once the file this process runs from is unlinked.
  const std::string path = std::filesystem::read_symlink("/proc/self/exe").string();
  constexpr std::string_view kDeleted = " (deleted)";
  NDT_CHECK(!path.ends_with(kDeleted),
            "this ndtrain binary ({}) was deleted or replaced while it ran (a rebuild?): the runs it starts would "
            "run another binary; start it again",
            path.substr(0, path.size() - kDeleted.size()));
  const std::string self = shell_quoted(path);
  if (ranks == 1) return self;
  return fmt::format("mpirun -np {} --oversubscribe --bind-to none --allow-run-as-root {}", ranks, self);
}

std::string run_command(const std::string& command, bool echo) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  NDT_CHECK(pipe != nullptr, "could not start: {}", command);
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    output += buffer;
    if (echo) std::fputs(buffer, stdout), std::fflush(stdout);
  }
  const int status = ::pclose(pipe);
  NDT_CHECK(status == 0, "the command failed (exit status {}): {}\n{}", status, command,
            output.size() > 3000 ? output.substr(output.size() - 3000) : output);
  return output;
}

}  // namespace ndt
