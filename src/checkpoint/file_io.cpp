#include "checkpoint/file_io.h"

#include "core/error.h"
#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ndt::ckpt {

namespace {

int open_or_fail(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  NDT_CHECK(fd >= 0, "cannot open {}: {}", path.string(), std::strerror(errno));
  return fd;
}

}  // namespace

PosixFile PosixFile::create(const std::filesystem::path& path) {
  return PosixFile(path, open_or_fail(path, O_WRONLY | O_CREAT | O_TRUNC));
}

PosixFile PosixFile::open_read(const std::filesystem::path& path) {
  return PosixFile(path, open_or_fail(path, O_RDONLY));
}

PosixFile PosixFile::open_directory(const std::filesystem::path& path) {
  return PosixFile(path, open_or_fail(path, O_RDONLY | O_DIRECTORY));
}

PosixFile::PosixFile(PosixFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

void PosixFile::write_all(const void* data, size_t bytes) { ndt::write_all(fd_, data, bytes, path_); }

void PosixFile::read_at(void* out, size_t bytes, int64_t offset) const {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    NDT_CHECK(n >= 0, "reading {} failed: {}", path_.string(), std::strerror(errno));
    NDT_CHECK(n > 0, "reading {} failed: unexpected end of file at byte {}", path_.string(),
              offset);
    p += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
}

int64_t PosixFile::size() const {
  struct stat st {};
  NDT_CHECK(::fstat(fd_, &st) == 0, "cannot stat {}: {}", path_.string(), std::strerror(errno));
  return static_cast<int64_t>(st.st_size);
}

void PosixFile::sync() {
  NDT_CHECK(::fsync(fd_) == 0, "fsync of {} failed: {}", path_.string(), std::strerror(errno));
}

void PosixFile::close() {
  const int rc = ::close(std::exchange(fd_, -1));
  NDT_CHECK(rc == 0, "closing {} failed: {}", path_.string(), std::strerror(errno));
}

void write_file_durably(const std::filesystem::path& path, std::string_view content) {
  PosixFile file = PosixFile::create(path);
  file.write_all(content.data(), content.size());
  file.sync();
  file.close();
}

void sync_directory(const std::filesystem::path& dir) {
  PosixFile::open_directory(dir).sync();
}

}  // namespace ndt::ckpt
