// A run owns its folders: an advisory lock (flock) on <folder>/.ndtrain.lock, held
// while the run lives, with the owner's host, pid and start time written inside for
// the message a second run gets. The kernel releases the lock when the owner dies,
// however it dies, so a lock file left by a crashed run is recognised as stale and
// taken over (the log says whose it was). Rank 0 takes the locks of a multi-rank job.
#pragma once

#include "comm/device_mesh.h"
#include "train/config.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {

class RunFolderLock {
 public:
  // Creates `folder` if needed and locks it. `setting` names the config key that chose
  // the folder, for messages. Throws naming the owner (host, pid, start) when another
  // live run holds it, or the folder and the reason when it cannot be created or written.
  RunFolderLock(const std::filesystem::path& folder, const std::string& setting);
  ~RunFolderLock();  // releases the lock and empties the file (a clean exit)
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  const std::filesystem::path& folder() const { return folder_; }
  // The owner recorded by a run that died holding the lock, if this one took it over.
  const std::optional<std::string>& stale_owner() const { return stale_owner_; }

 private:
  std::filesystem::path folder_;
  int fd_ = -1;
  std::optional<std::string> stale_owner_;
};

inline constexpr const char* kRunLockFile = ".ndtrain.lock";

// The run's folders (runtime.out_dir and the checkpoint folder, each once), locked by
// rank 0 of the job (a stale owner is noted in the log); an error on rank 0 is thrown
// on every rank. Collective.
std::vector<std::unique_ptr<RunFolderLock>> own_run_folders(const RunConfig& config, DeviceMesh& mesh,
                                                            std::ostream* log);

}  // namespace ndt
