#include "offload/swap_file.h"

#include "checkpoint/checksum.h"
#include "offload/io_buffer.h"
#include "offload/io_stats.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ndt::offload {

namespace {

std::string chunk_text(int64_t c, int64_t chunk_bytes) {
  return fmt::format("chunk {} (bytes {} to {})", c, c * chunk_bytes, (c + 1) * chunk_bytes);
}

}  // namespace

SwapFile::SwapFile(std::filesystem::path path, int64_t chunks, int64_t chunk_bytes, MemTag tag, AsyncIo& io)
    : chunks_(chunks), chunk_bytes_(chunk_bytes), tag_(tag), io_(io), writing_(static_cast<size_t>(chunks), 0) {
  NDT_CHECK(chunks >= 0 && chunk_bytes > 0 && chunk_bytes % static_cast<int64_t>(IoBuffer::kAlignment) == 0,
            "offload: swap file {} of {} chunks of {} bytes (chunks must be a positive multiple of {} bytes)",
            path.string(), chunks, chunk_bytes, IoBuffer::kAlignment);
  live_ = open_copy(path);
  MemoryLedger::instance().on_disk_alloc(tag_, static_cast<size_t>(bytes()));
}

SwapFile::~SwapFile() {
  abort_restore();
  std::error_code ec;
  std::filesystem::remove(live_.path, ec);
  close_copy(live_);
  MemoryLedger::instance().on_disk_free(tag_, static_cast<size_t>(bytes()));
}

SwapFile::Copy SwapFile::open_copy(const std::filesystem::path& path) {
  Copy copy;
  copy.path = path;
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
  copy.fd = direct_ ? ::open(path.c_str(), flags | O_DIRECT, 0600) : -1;
  if (copy.fd < 0 && (!direct_ || errno == EINVAL)) {  // a filesystem without direct I/O: the page cache
    direct_ = false;
    copy.fd = ::open(path.c_str(), flags, 0600);
  }
  if (copy.fd < 0) {
    throw SwapError(fmt::format("offload: cannot create swap file {}: {}", path.string(), std::strerror(errno)));
  }
  copy.crc.assign(static_cast<size_t>(chunks_), 0);
  copy.written.assign(static_cast<size_t>(chunks_), 0);
  return copy;
}

void SwapFile::close_copy(Copy& copy) noexcept {
  if (copy.fd >= 0) ::close(copy.fd);
  copy.fd = -1;
}

void SwapFile::check_chunk(int64_t c) const {
  NDT_CHECK(c >= 0 && c < chunks_, "offload: chunk {} of swap file {} is outside its {} chunks", c, path().string(),
            chunks_);
}

SwapFile::Pending SwapFile::start_read(int64_t c, void* buffer) {
  check_chunk(c);
  NDT_CHECK(!writing_[static_cast<size_t>(c)], "offload: chunk {} of {} is read while its write is in flight", c,
            path().string());
  Pending p{c, 0, false, buffer};
  if (!written(c)) {
    std::memset(buffer, 0, static_cast<size_t>(chunk_bytes_));
    return p;
  }
  p.ticket = io_.submit({false, live_.fd, buffer, static_cast<size_t>(chunk_bytes_), c * chunk_bytes_});
  return p;
}

SwapFile::Pending SwapFile::start_write(int64_t c, const void* buffer) {
  check_chunk(c);
  NDT_CHECK(!writing_[static_cast<size_t>(c)], "offload: chunk {} of {} is written twice at once", c, path().string());
  live_.crc[static_cast<size_t>(c)] = ckpt::crc32c(buffer, static_cast<size_t>(chunk_bytes_));
  live_.written[static_cast<size_t>(c)] = 1;
  writing_[static_cast<size_t>(c)] = 1;
  Pending p{c, 0, true, const_cast<void*>(buffer)};
  p.ticket = io_.submit({true, live_.fd, p.buffer, static_cast<size_t>(chunk_bytes_), c * chunk_bytes_});
  return p;
}

void SwapFile::fail_transfer(const Pending& p, int64_t result) const {
  const std::string what = fmt::format("{} of swap file {}", chunk_text(p.chunk, chunk_bytes_), path().string());
  if (result < 0) {
    throw SwapError(fmt::format("offload: {} {} failed: {}{}", p.write ? "writing" : "reading", what,
                                std::strerror(static_cast<int>(-result)),
                                result == -ENOSPC ? " (the disk holding offload.dir is full)" : ""));
  }
  throw SwapError(fmt::format("offload: {} {} moved {} of its {} bytes: the file was truncated or replaced outside "
                              "this run{}",
                              p.write ? "writing" : "reading", what, result, chunk_bytes_,
                              p.write ? " (or the disk is full)" : ""));
}

void SwapFile::finish(Pending& p) {
  if (p.ticket == 0) return;
  const int64_t result = io_.wait(p.ticket);
  p.ticket = 0;
  if (p.write) writing_[static_cast<size_t>(p.chunk)] = 0;
  if (result != chunk_bytes_) fail_transfer(p, result);
  count_io(p.write, chunk_bytes_);
  if (p.write) return;
  const uint32_t crc = ckpt::crc32c(p.buffer, static_cast<size_t>(chunk_bytes_));
  const uint32_t stored = live_.crc[static_cast<size_t>(p.chunk)];
  if (crc != stored) {
    throw SwapError(fmt::format("offload: swap file {} is damaged: {} has CRC32C {:08x}, but {:08x} was written (the "
                                "file was changed outside this run, or the disk returned other bytes)",
                                path().string(), chunk_text(p.chunk, chunk_bytes_), crc, stored));
  }
}

void SwapFile::abandon(Pending& p) noexcept {
  if (p.ticket == 0) return;
  try {
    io_.wait(p.ticket);
  } catch (...) {
  }
  p.ticket = 0;
  if (p.write) writing_[static_cast<size_t>(p.chunk)] = 0;
}

void SwapFile::sync_chunk(Copy& copy, int64_t c, void* buffer, bool write) {
  Pending p{c, 0, write, buffer};
  if (write) {
    copy.crc[static_cast<size_t>(c)] = ckpt::crc32c(buffer, static_cast<size_t>(chunk_bytes_));
    copy.written[static_cast<size_t>(c)] = 1;
  } else if (!copy.written[static_cast<size_t>(c)]) {
    std::memset(buffer, 0, static_cast<size_t>(chunk_bytes_));
    return;
  }
  p.ticket = io_.submit({write, copy.fd, buffer, static_cast<size_t>(chunk_bytes_), c * chunk_bytes_});
  const int64_t result = io_.wait(p.ticket);
  if (result != chunk_bytes_) fail_transfer(p, result);
  count_io(write, chunk_bytes_);
  if (!write && ckpt::crc32c(buffer, static_cast<size_t>(chunk_bytes_)) != copy.crc[static_cast<size_t>(c)]) {
    throw SwapError(fmt::format("offload: swap file {} is damaged: {} does not have the CRC32C it was written with",
                                copy.path.string(), chunk_text(c, chunk_bytes_)));
  }
}

void SwapFile::for_each_piece(int64_t first, int64_t count,
                              const std::function<void(int64_t chunk, int64_t in_chunk, int64_t n, int64_t done)>& fn) {
  const int64_t per_chunk = chunk_bytes_ / static_cast<int64_t>(sizeof(float));
  for (int64_t e = first; e < first + count;) {
    const int64_t c = e / per_chunk, in_chunk = e - c * per_chunk;
    const int64_t n = std::min(first + count - e, per_chunk - in_chunk);
    check_chunk(c);
    fn(c, in_chunk, n, e - first);
    e += n;
  }
}

void SwapFile::read_elements(int64_t first, int64_t count, float* out) {
  Copy& copy = restore_.fd >= 0 ? restore_ : live_;
  IoBuffer buffer(static_cast<size_t>(chunk_bytes_), tag_);
  for_each_piece(first, count, [&](int64_t c, int64_t in_chunk, int64_t n, int64_t done) {
    sync_chunk(copy, c, buffer.data(), false);
    std::copy(buffer.floats() + in_chunk, buffer.floats() + in_chunk + n, out + done);
  });
}

void SwapFile::write_elements(int64_t first, int64_t count, const float* in) {
  Copy& copy = restore_.fd >= 0 ? restore_ : live_;
  IoBuffer buffer(static_cast<size_t>(chunk_bytes_), tag_);
  for_each_piece(first, count, [&](int64_t c, int64_t in_chunk, int64_t n, int64_t done) {
    NDT_CHECK(!writing_[static_cast<size_t>(c)], "offload: chunk {} of {} is written while a write is in flight", c,
              path().string());
    if (n * static_cast<int64_t>(sizeof(float)) < chunk_bytes_) {
      sync_chunk(copy, c, buffer.data(), false);  // the rest of the chunk stays
    }
    std::copy(in + done, in + done + n, buffer.floats() + in_chunk);
    sync_chunk(copy, c, buffer.data(), true);
  });
}

void SwapFile::begin_restore() {
  abort_restore();
  std::filesystem::path path = live_.path;
  path += ".restore";
  restore_ = open_copy(path);
  MemoryLedger::instance().on_disk_alloc(tag_, static_cast<size_t>(bytes()));
}

void SwapFile::commit_restore() {
  NDT_CHECK(restore_.fd >= 0, "offload: no restore of {} in progress", path().string());
  if (::rename(restore_.path.c_str(), live_.path.c_str()) != 0) {
    throw SwapError(fmt::format("offload: cannot put the restored swap file {} in place: {}", restore_.path.string(),
                                std::strerror(errno)));
  }
  close_copy(live_);
  restore_.path = live_.path;
  live_ = std::move(restore_);
  restore_ = Copy();
  MemoryLedger::instance().on_disk_free(tag_, static_cast<size_t>(bytes()));
}

void SwapFile::abort_restore() noexcept {
  if (restore_.fd < 0) return;
  close_copy(restore_);
  std::error_code ec;
  std::filesystem::remove(restore_.path, ec);
  restore_ = Copy();
  MemoryLedger::instance().on_disk_free(tag_, static_cast<size_t>(bytes()));
}

int64_t SwapFile::allocated_bytes() const {
  struct stat st {};
  if (::fstat(live_.fd, &st) != 0) return 0;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

}  // namespace ndt::offload
