// Faults of the files a test writes: a disk that fills up after `bytes` bytes of any
// one file (RLIMIT_FSIZE, with SIGXFSZ ignored so writes fail with EFBIG, "File too
// large", instead of killing the process), restored at scope exit; and the entries of
// a folder, to check that a failed write left nothing behind.
#pragma once

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <set>
#include <string>

namespace ndt::testing {

class FullDisk {
 public:
  explicit FullDisk(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FullDisk() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FullDisk(const FullDisk&) = delete;
  FullDisk& operator=(const FullDisk&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

inline std::set<std::string> entries_of(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

}  // namespace ndt::testing
