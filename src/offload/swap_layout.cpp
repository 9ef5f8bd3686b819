#include "offload/swap_layout.h"

#include "core/error.h"

#include <algorithm>

namespace ndt::offload {

SwapLayout::SwapLayout(const std::vector<std::pair<int64_t, int64_t>>& unit_ranges, int64_t chunk_elements)
    : chunk_elements_(chunk_elements) {
  NDT_CHECK(chunk_elements > 0, "offload: chunks of {} elements", chunk_elements);
  int64_t expected_begin = 0;
  for (size_t u = 0; u < unit_ranges.size(); ++u) {
    const auto [begin, end] = unit_ranges[u];
    NDT_CHECK(begin <= end && (begin == end || begin == expected_begin),
              "offload: unit {} spans arena elements [{}, {}), not adjacent to the units before it (which end at {})",
              u, begin, end, expected_begin);
    SwapRegion r;
    r.arena_begin = begin;
    r.arena_end = end;
    r.first_chunk = chunks_;
    r.chunks = (end - begin + chunk_elements - 1) / chunk_elements;
    chunks_ += r.chunks;
    unit_of_chunk_.insert(unit_of_chunk_.end(), static_cast<size_t>(r.chunks), static_cast<int>(u));
    if (end > begin) expected_begin = end;
    regions_.push_back(r);
  }
}

std::pair<int64_t, int64_t> SwapLayout::chunk_arena_range(int64_t c) const {
  const SwapRegion& r = region(unit_of_chunk(c));
  const int64_t begin = r.arena_begin + (c - r.first_chunk) * chunk_elements_;
  return {begin, std::min(r.arena_end, begin + chunk_elements_)};
}

int SwapLayout::unit_of_chunk(int64_t c) const {
  NDT_CHECK(c >= 0 && c < chunks_, "offload: chunk {} outside the layout's {} chunks", c, chunks_);
  return unit_of_chunk_[static_cast<size_t>(c)];
}

int64_t SwapLayout::file_element(int64_t a) const {
  for (const SwapRegion& r : regions_) {
    if (a >= r.arena_begin && a < r.arena_end) return r.first_chunk * chunk_elements_ + (a - r.arena_begin);
  }
  fail("offload: arena element {} lies in no unit of the swap layout", a);
}

int64_t swap_chunks(const std::vector<int64_t>& unit_elements, int64_t chunk_elements) {
  int64_t chunks = 0;
  for (int64_t n : unit_elements) chunks += (n + chunk_elements - 1) / chunk_elements;
  return chunks;
}

}  // namespace ndt::offload
