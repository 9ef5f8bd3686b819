// POSIX file access for checkpoints: durable writes (write(2) then fsync, directory
// fsync after creating or renaming entries) and positioned reads (pread(2)) of one
// chunk without seeking. stdio would buffer and hide fsync; every failure here
// throws ndt::Error naming the path and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <utility>

namespace ndt::ckpt {

class PosixFile {
 public:
  static PosixFile create(const std::filesystem::path& path);     // write-only, truncated
  static PosixFile open_read(const std::filesystem::path& path);
  static PosixFile open_directory(const std::filesystem::path& path);  // only to sync() it
  ~PosixFile();
  PosixFile(PosixFile&& other) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  PosixFile& operator=(PosixFile&&) = delete;

  void write_all(const void* data, size_t bytes);
  void read_at(void* out, size_t bytes, int64_t offset) const;
  int64_t size() const;
  void sync();   // fsync: the bytes are on stable storage when it returns
  void close();  // reports errors that the destructor would swallow

 private:
  PosixFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_ = -1;
};

// create + write_all + sync + close.
void write_file_durably(const std::filesystem::path& path, std::string_view content);

// fsync of a directory, making the creation, removal or renaming of its entries durable.
void sync_directory(const std::filesystem::path& dir);

}  // namespace ndt::ckpt
