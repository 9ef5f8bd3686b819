// One pass over every chunk of some swap files that share a SwapLayout, in file (so
// arena) order, with I/O overlapping the caller's work: while chunk i is visited, the
// reads of chunks i+1 .. i+depth are in flight and the write of chunk i-1 may be. The
// optimizer step streams the AdamW moments (and, with parameter offload, the parameter
// and gradient shards) this way; the gradient norm streams the gradient shards.
// Reads: every chunk of every file once (a never-written chunk costs no I/O: zeros).
// Writes: every chunk of the files marked write_back, from the same buffers after the
// visit. Memory (resident, while run() runs): (depth + 2) x chunk_bytes per file, under
// each file's tag.
#pragma once

#include "core/memory.h"
#include "offload/swap_file.h"
#include "offload/swap_layout.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace ndt::offload {

struct StreamedFile {
  SwapFile* file = nullptr;
  bool write_back = false;
  MemTag tag = MemTag::other;  // of its staging buffers
};

// visit(chunk, arena_begin, arena_end, values): values[f] holds file f's floats of the
// chunk, element 0 being arena element arena_begin (values past arena_end are padding).
using ChunkVisitor = std::function<void(int64_t chunk, int64_t arena_begin, int64_t arena_end, float* const* values)>;

// Runs the pass. On an error (a SwapError from a read or a write, or the visitor's) every
// transfer in flight is waited for before the buffers are freed, and the error rethrown.
void stream_chunks(const SwapLayout& layout, const std::vector<StreamedFile>& files, int depth,
                   const ChunkVisitor& visit);

// Resident bytes stream_chunks holds for these files.
int64_t stream_buffer_bytes(int64_t chunk_bytes, int files, int depth);

}  // namespace ndt::offload
