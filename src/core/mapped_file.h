// A file mapped read-only (mmap), for data read in scattered windows that must not stay
// resident: release() drops pages from this process after a window is copied out
// (madvise MADV_DONTNEED; the page cache keeps them), so a file larger than memory is
// read with a flat resident set. No read-ahead (MADV_RANDOM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ndt {

class MappedFile {
 public:
  // Maps the first `bytes` bytes of `path` (which the caller has checked to hold them);
  // throws ndt::Error naming the file and the system's reason.
  MappedFile(const std::string& path, size_t bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return base_; }
  size_t size() const { return bytes_; }
  // Drops the whole pages of [offset, offset + len) from this process's resident set.
  void release(size_t offset, size_t len) const;

 private:
  const uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ndt
