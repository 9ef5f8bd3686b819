#include "core/output_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ndt {

namespace {


std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

}  // namespace

void write_all(int fd, const void* data, size_t bytes, const std::filesystem::path& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    NDT_CHECK(n > 0, "writing {} failed: {}", path.string(), std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

AtomicFile::AtomicFile(std::filesystem::path path)
    : path_(std::move(path)), temporary_(path_.string() + ".tmp-" + std::to_string(::getpid())) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  NDT_CHECK(fd_ >= 0, "cannot create {}: {}", path_.string(), std::strerror(errno));
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ < 0) return;
  ::close(std::exchange(fd_, -1));
  ::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  NDT_CHECK(fd_ >= 0, "writing {} after it was committed", path_.string());
  write_all(fd_, data, bytes, path_);
}

void AtomicFile::commit() {
  NDT_CHECK(fd_ >= 0, "{} was already committed", path_.string());
  NDT_CHECK(::fsync(fd_) == 0, "writing {} failed: fsync: {}", path_.string(), std::strerror(errno));
  const int fd = std::exchange(fd_, -1);
  // Once closed, the destructor no longer removes the temporary: do it here on failure.
  auto fail_and_remove = [&](const char* step) {
    const std::string reason = std::strerror(errno);
    ::unlink(temporary_.c_str());
    fail("writing {} failed: {}: {}", path_.string(), step, reason);
  };
  if (::close(fd) != 0) fail_and_remove("close");
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail_and_remove("rename");
  // The rename is durable only once the folder's entry is.
  const int dir = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dir >= 0 && ::fsync(dir) == 0;
  const int error = errno;
  if (dir >= 0) ::close(dir);
  NDT_CHECK(synced, "writing {} failed: fsync of its folder: {}", path_.string(), std::strerror(error));
}

AppendFile::AppendFile(std::filesystem::path path, bool truncate) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  NDT_CHECK(fd_ >= 0, "cannot open {} for writing: {}", path_.string(), std::strerror(errno));
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view record) { write_all(fd_, record.data(), record.size(), path_); }

}  // namespace ndt
