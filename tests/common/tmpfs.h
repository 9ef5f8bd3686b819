// A small tmpfs mounted for one test (a real full disk, not a simulated one), unmounted
// and removed at scope exit. Mounting needs root (CAP_SYS_ADMIN); when the system refuses,
// mounted() is false and reason() says why, and the test skips with that message.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace ndt::testing {

class Tmpfs {
 public:
  explicit Tmpfs(size_t bytes) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::path("/tmp") /
            ("ndt_tmpfs_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0700";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      reason_ = std::string("mounting a ") + std::to_string(bytes) + "-byte tmpfs on " + path_.string() +
                " was refused (" + std::strerror(errno) + "); this test needs root (CAP_SYS_ADMIN)";
    }
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& reason() const { return reason_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  bool mounted_ = false;
  std::string reason_;
};

}  // namespace ndt::testing
