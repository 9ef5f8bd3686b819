#include "offload/chunk_stream.h"

#include "core/error.h"
#include "offload/io_buffer.h"

#include <algorithm>

namespace ndt::offload {

namespace {

// The slots' buffers and transfers in flight; waits for every transfer it still holds
// when it goes (so no buffer is freed under the kernel).
class Slots {
 public:
  Slots(const std::vector<StreamedFile>& files, int count, int64_t chunk_bytes) : files_(files) {
    buffers_.resize(static_cast<size_t>(count));
    pending_.resize(static_cast<size_t>(count));
    for (int s = 0; s < count; ++s) {
      for (const StreamedFile& f : files) buffers_[static_cast<size_t>(s)].emplace_back(static_cast<size_t>(chunk_bytes), f.tag);
      pending_[static_cast<size_t>(s)].resize(files.size());
    }
  }
  ~Slots() {
    for (std::vector<SwapFile::Pending>& slot : pending_) {
      for (size_t f = 0; f < slot.size(); ++f) files_[f].file->abandon(slot[f]);
    }
  }
  IoBuffer& buffer(int s, size_t f) { return buffers_[static_cast<size_t>(s)][f]; }
  SwapFile::Pending& pending(int s, size_t f) { return pending_[static_cast<size_t>(s)][f]; }
  void finish(int s) {
    for (size_t f = 0; f < files_.size(); ++f) files_[f].file->finish(pending(s, f));
  }

 private:
  const std::vector<StreamedFile>& files_;
  std::vector<std::vector<IoBuffer>> buffers_;
  std::vector<std::vector<SwapFile::Pending>> pending_;
};

}  // namespace

int64_t stream_buffer_bytes(int64_t chunk_bytes, int files, int depth) { return (depth + 2) * chunk_bytes * files; }

void stream_chunks(const SwapLayout& layout, const std::vector<StreamedFile>& files, int depth,
                   const ChunkVisitor& visit) {
  NDT_CHECK(depth >= 0, "offload.prefetch = {} must not be negative", depth);
  if (files.empty() || layout.chunks() == 0) return;
  const int64_t chunk_bytes = files.front().file->chunk_bytes();
  for (const StreamedFile& f : files) {
    NDT_CHECK(f.file->chunk_bytes() == chunk_bytes && f.file->chunks() == layout.chunks(),
              "offload: swap file {} does not have the layout's chunks", f.file->path().string());
  }
  const int count = depth + 2;  // depth ahead, the one visited, the one being written
  Slots slots(files, count, chunk_bytes);
  std::vector<float*> values(files.size());
  const int64_t n = layout.chunks();
  int64_t issued = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (; issued < std::min(n, i + depth + 1); ++issued) {
      const int s = static_cast<int>(issued % count);
      slots.finish(s);  // the write of the chunk that held this slot
      for (size_t f = 0; f < files.size(); ++f) {
        slots.pending(s, f) = files[f].file->start_read(issued, slots.buffer(s, f).data());
      }
    }
    const int s = static_cast<int>(i % count);
    slots.finish(s);
    for (size_t f = 0; f < files.size(); ++f) values[f] = slots.buffer(s, f).floats();
    const auto [begin, end] = layout.chunk_arena_range(i);
    visit(i, begin, end, values.data());
    for (size_t f = 0; f < files.size(); ++f) {
      if (files[f].write_back) slots.pending(s, f) = files[f].file->start_write(i, slots.buffer(s, f).data());
    }
  }
  for (int s = 0; s < count; ++s) slots.finish(s);
}

}  // namespace ndt::offload
