#include "train/run_lock.h"

#include "core/error.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace ndt {

namespace {

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string this_process() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  return fmt::format("host {}, pid {}, started {:%Y-%m-%d %H:%M:%S} UTC", host, ::getpid(),
                     std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
}

}  // namespace

RunFolderLock::RunFolderLock(const std::filesystem::path& folder, const std::string& setting) : folder_(folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  NDT_CHECK(!ec, "{} = \"{}\": cannot create the folder: {}", setting, folder.string(), ec.message());
  const std::filesystem::path path = folder / kRunLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  NDT_CHECK(fd_ >= 0, "{} = \"{}\": cannot write in the folder ({}: {})", setting, folder.string(),
            path.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string owner = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    NDT_CHECK(err != EWOULDBLOCK, "{} = \"{}\" is in use by another run ({}); wait for it to end, or give this "
              "run another {}", setting, folder.string(), owner.empty() ? "owner unknown" : owner, setting);
    fail("{} = \"{}\": cannot lock {}: {}", setting, folder.string(), path.string(), std::strerror(err));
  }
  const std::string previous = read_all(fd_);
  if (!previous.empty()) stale_owner_ = previous;
  const std::string me = this_process() + "\n";
  const bool written = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) ==
                                                         static_cast<ssize_t>(me.size());
  if (!written) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail("{} = \"{}\": cannot write {}: {}", setting, folder.string(), path.string(), std::strerror(err));
  }
}

RunFolderLock::~RunFolderLock() {
  if (fd_ < 0) return;
  // Empty the file, then unlock: the next run finds no owner and no stale note (if
  // emptying fails, the next run reports this one as a stale owner: harmless).
  [[maybe_unused]] const int emptied = ::ftruncate(fd_, 0);
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace ndt
