#include "core/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ndt {

MappedFile::MappedFile(const std::string& path, size_t bytes) : bytes_(bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  NDT_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  NDT_CHECK(p != MAP_FAILED, "cannot map {} ({} bytes): {}", path, bytes_, std::strerror(err));
  base_ = static_cast<const uint8_t*>(p);
  ::madvise(p, bytes_, MADV_RANDOM);  // batches read scattered windows: no read-ahead
}

MappedFile::~MappedFile() { ::munmap(const_cast<uint8_t*>(base_), bytes_); }

void MappedFile::release(size_t offset, size_t len) const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t first = offset / page * page, last = (offset + len + page - 1) / page * page;
  ::madvise(const_cast<uint8_t*>(base_) + first, std::min(last, bytes_) - first, MADV_DONTNEED);
}

}  // namespace ndt
