#include "offload/swap_space.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

namespace ndt::offload {

namespace {

bool is_swap_file(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return name.ends_with(".swap") || name.ends_with(".swap.restore");
}

// Bytes the swap files in `dir` occupy on the disk now.
int64_t allocated_in(const std::filesystem::path& dir) {
  int64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    struct stat st {};
    if (is_swap_file(entry.path()) && ::stat(entry.path().c_str(), &st) == 0) bytes += st.st_blocks * 512;
  }
  return bytes;
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

SwapSpace::SwapSpace(const OffloadOptions& options) : options_(options) {
  NDT_CHECK(std::filesystem::is_directory(options.dir), "offload: the swap folder {} does not exist",
            options.dir.string());
  for (const auto& entry : std::filesystem::directory_iterator(options.dir)) {
    std::error_code ec;
    if (is_swap_file(entry.path())) std::filesystem::remove(entry.path(), ec);
  }
  io_ = make_async_io(options.backend, 64);
}

std::unique_ptr<SwapFile> SwapSpace::create(const std::string& name, int64_t chunks, MemTag tag) {
  const std::filesystem::path path = options_.dir / (name + ".swap");
  const int64_t bytes = chunks * options_.chunk_bytes;
  struct statvfs fs {};
  if (::statvfs(options_.dir.c_str(), &fs) != 0) {
    throw SwapError(fmt::format("offload.dir: cannot read the free space of {}: {}", options_.dir.string(),
                                std::strerror(errno)));
  }
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  const int64_t needed = created_bytes_ + bytes - allocated_in(options_.dir);
  if (needed > free_bytes) {
    throw SwapError(fmt::format("offload.dir: {} has {:.3f} GiB free, but this rank's swap files need {:.3f} GiB more "
                                "({:.3f} GiB in all, {} the next): free space or point offload.dir at a larger disk",
                                options_.dir.string(), gib(free_bytes), gib(needed), gib(created_bytes_ + bytes),
                                path.string()));
  }
  created_bytes_ += bytes;
  return std::make_unique<SwapFile>(path, chunks, options_.chunk_bytes, tag, *io_);
}

}  // namespace ndt::offload
