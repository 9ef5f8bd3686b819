// Where a rank's arena of model state (its ZeRO shard arena, parallel/data/shard_layout.h)
// lies in its swap files: unit by unit in arena order, each unit's elements starting at
// a chunk boundary. A unit's elements are then whole chunks of the file, read and
// written without touching another unit's (FSDP reads one unit's parameter shards ahead
// of its gather), and the file order is the arena order, so a pass over the chunks
// visits the elements as the in-memory code does (the gradient norm's summation order).
// Disk per swap file: sum over units of ceil(unit elements / chunk elements) chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ndt::offload {

struct SwapRegion {
  int64_t arena_begin = 0, arena_end = 0;  // the unit's elements in the arena
  int64_t first_chunk = 0, chunks = 0;     // its chunks in the file
};

class SwapLayout {
 public:
  SwapLayout() = default;
  // unit_ranges[u]: unit u's [begin, end) in the arena, the units adjacent and in order
  // (an empty range: the unit holds nothing on this rank). chunk_elements > 0.
  SwapLayout(const std::vector<std::pair<int64_t, int64_t>>& unit_ranges, int64_t chunk_elements);

  int64_t chunk_elements() const { return chunk_elements_; }
  int64_t chunks() const { return chunks_; }
  int units() const { return static_cast<int>(regions_.size()); }
  const SwapRegion& region(int unit) const { return regions_[static_cast<size_t>(unit)]; }
  // The arena elements chunk c holds, [begin, end): a unit's last chunk may hold fewer
  // than chunk_elements (the rest of it is padding, zeros).
  std::pair<int64_t, int64_t> chunk_arena_range(int64_t c) const;
  int unit_of_chunk(int64_t c) const;
  // Where arena element a lies in the file, in elements.
  int64_t file_element(int64_t arena_offset) const;

 private:
  int64_t chunk_elements_ = 1, chunks_ = 0;
  std::vector<SwapRegion> regions_;
  std::vector<int> unit_of_chunk_;
};

// The chunks a swap file of these unit sizes (elements) holds.
int64_t swap_chunks(const std::vector<int64_t>& unit_elements, int64_t chunk_elements);

}  // namespace ndt::offload
