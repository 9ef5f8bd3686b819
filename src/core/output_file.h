// Files ndtrain writes outside checkpoints, so that a failure never leaves a partial
// file a user could mistake for a whole one, and never passes silently.
//   AtomicFile: a whole file (converted models, token shards) written under a
//     temporary name in the same folder and renamed onto its path only once complete
//     and on stable storage; until commit() the path is untouched, and an error or a
//     destructor before it removes the temporary.
//   AppendFile: a log that grows record by record (metrics.jsonl), where each record
//     is one write(2) that either lands whole or throws.
// Every failure throws ndt::Error naming the file and the system's reason.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace ndt {

// write(2) until every byte is out (retrying short writes and EINTR); throws ndt::Error
// naming `path` and the system's reason (ENOSPC, EFBIG, EIO) otherwise.
void write_all(int fd, const void* data, size_t bytes, const std::filesystem::path& path);

class AtomicFile {
 public:
  // Creates "<path>.tmp-<pid>" next to `path` (which need not exist yet).
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();  // before commit(): removes the temporary
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, close, rename onto the path (replacing a file there), fsync of the folder.
  void commit();
  const std::filesystem::path& path() const { return path_; }

 private:
  void discard() noexcept;

  std::filesystem::path path_;
  std::filesystem::path temporary_;
  int fd_ = -1;
};

class AppendFile {
 public:
  // Opens for appending, creating the file; truncate: start it empty.
  AppendFile(std::filesystem::path path, bool truncate);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void append(std::string_view record);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace ndt
