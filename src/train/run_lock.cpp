#include "train/run_lock.h"

#include "core/error.h"
#include "train/agreed_error.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
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

std::vector<std::unique_ptr<RunFolderLock>> own_run_folders(const RunConfig& config, DeviceMesh& mesh,
                                                            std::ostream* log) {
  std::vector<std::unique_ptr<RunFolderLock>> locks;
  std::string error;
  if (mesh.world().rank() == 0) {
    try {
      std::vector<std::pair<std::filesystem::path, std::string>> folders;
      if (!config.out_dir.empty()) folders.emplace_back(config.out_dir, "runtime.out_dir");
      if (!config.checkpoint_dir.empty()) folders.emplace_back(config.checkpoint_dir, "checkpoint.dir");
      else if (!config.out_dir.empty()) folders.emplace_back(std::filesystem::path(config.out_dir) / "checkpoints",
                                                             "runtime.out_dir (its checkpoints folder)");
      for (const auto& [folder, setting] : folders) {
        const bool locked = std::any_of(locks.begin(), locks.end(), [&](const auto& lock) {
          return std::filesystem::weakly_canonical(lock->folder()) == std::filesystem::weakly_canonical(folder);
        });
        if (locked) continue;  // checkpoint.dir = runtime.out_dir: one folder, one lock
        locks.push_back(std::make_unique<RunFolderLock>(folder, setting));
        const std::optional<std::string>& stale = locks.back()->stale_owner();
        if (stale && log) {
          fmt::print(*log, "note: {} was locked by a run that ended without releasing it ({}); taking it over\n",
                     folder.string(), *stale);
        }
      }
    } catch (const Error& e) {
      error = e.what();
    }
  }
  throw_if_any_rank_failed(mesh, error);
  return locks;
}

}  // namespace ndt
