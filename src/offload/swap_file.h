// A swap file: one rank's array of floats on disk, moved in chunks of a fixed size
// (a multiple of 4096 bytes, opened with O_DIRECT where the filesystem allows it, so the
// page cache neither doubles the memory nor hides the disk's speed). Each chunk's CRC32C
// is taken when it is written and kept in memory; a read is verified against it, so a
// chunk changed on disk behind the run's back is found and named. A chunk never written
// reads as zeros without touching the disk (a fresh optimizer state costs no I/O), and
// the file grows as chunks are first written. Swap files are scratch: a run recreates
// them from its checkpoint on resume, and removes them when it ends.
// Writes: the chunks the caller writes, nothing else. Memory: the checksum table (4
// bytes a chunk); the caller owns the buffers. The file's full size (chunks x
// chunk_bytes) is counted on the ledger's disk tier under its tag while it exists.
#pragma once

#include "core/error.h"
#include "core/memory.h"
#include "offload/async_io.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

namespace ndt::offload {

// A failed or damaged swap-file transfer: the message names the file, the chunk, its
// bytes and the reason. The trainer stops the run on it (the last checkpoint is intact).
class SwapError : public Error {
 public:
  using Error::Error;
};

class SwapFile {
 public:
  SwapFile(std::filesystem::path path, int64_t chunks, int64_t chunk_bytes, MemTag tag, AsyncIo& io);
  ~SwapFile();  // closes and removes the file (and a restore copy in progress)
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  struct Pending {
    int64_t chunk = -1;
    uint64_t ticket = 0;  // 0: nothing in flight (a never-written chunk, or finished)
    bool write = false;
    void* buffer = nullptr;
  };
  // Starts reading chunk c into buffer (chunk_bytes, 4096-aligned).
  Pending start_read(int64_t c, void* buffer);
  // Starts writing chunk c from buffer, which must not change until finish().
  Pending start_write(int64_t c, const void* buffer);
  // Waits for it; throws SwapError on an I/O error (a full disk), a short transfer or a
  // read whose checksum is not the one written.
  void finish(Pending& p);
  // Waits without throwing: unwinding after another error, before the buffer is freed.
  void abandon(Pending& p) noexcept;

  // Elements [first, first + count) of the file's floats, synchronously (checkpoints,
  // tests): whole chunks are moved and verified; a write of part of a chunk reads it
  // first. While a restore is in progress these go to the restore copy.
  void read_elements(int64_t first, int64_t count, float* out);
  void write_elements(int64_t first, int64_t count, const float* in);

  // Replacing the whole contents (loading a checkpoint) all or nothing: begin_restore()
  // starts a copy beside the file (<path>.restore, every chunk zero), commit_restore()
  // renames it over the file, abort_restore() removes it.
  void begin_restore();
  void commit_restore();
  void abort_restore() noexcept;

  const std::filesystem::path& path() const { return live_.path; }
  int64_t chunks() const { return chunks_; }
  int64_t chunk_bytes() const { return chunk_bytes_; }
  int64_t bytes() const { return chunks_ * chunk_bytes_; }
  bool direct() const { return direct_; }  // O_DIRECT in use
  bool written(int64_t c) const { return live_.written[static_cast<size_t>(c)] != 0; }
  int64_t allocated_bytes() const;         // on the disk now (the file grows as chunks are written)

 private:
  struct Copy {
    std::filesystem::path path;
    int fd = -1;
    std::vector<uint32_t> crc;
    std::vector<char> written;
  };
  Copy open_copy(const std::filesystem::path& path);
  void close_copy(Copy& copy) noexcept;
  void check_chunk(int64_t c) const;
  [[noreturn]] void fail_transfer(const Pending& p, int64_t result) const;
  void sync_chunk(Copy& copy, int64_t c, void* buffer, bool write);  // submit + finish
  // Calls fn for each chunk elements [first, first + count) touch: the chunk, where the
  // piece starts in it, its length and how many elements came before it.
  void for_each_piece(int64_t first, int64_t count,
                      const std::function<void(int64_t chunk, int64_t in_chunk, int64_t n, int64_t done)>& fn);

  int64_t chunks_, chunk_bytes_;
  MemTag tag_;
  AsyncIo& io_;
  bool direct_ = true;
  Copy live_;
  Copy restore_;  // fd >= 0 while a restore is in progress
  std::vector<char> writing_;  // a write of the chunk is in flight
};

}  // namespace ndt::offload
