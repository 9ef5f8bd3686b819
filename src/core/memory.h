// Memory ledger: every tensor allocation is tagged, so current and peak bytes per
// tag (per rank: one rank is one process) can be reported and tested against theory.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <string_view>

namespace ndt {

enum class MemTag : uint8_t { params, grads, optimizer, activations, comm, other };
inline constexpr size_t kNumMemTags = 6;
std::string_view mem_tag_name(MemTag tag);

class MemoryLedger {
 public:
  static MemoryLedger& instance();

  void on_alloc(MemTag tag, size_t bytes);
  void on_free(MemTag tag, size_t bytes);

  size_t current(MemTag tag) const { return current_[index(tag)].load(); }
  size_t peak(MemTag tag) const { return peak_[index(tag)].load(); }
  size_t current_total() const { return total_.load(); }
  // Peak of the sum over tags (not the sum of per-tag peaks).
  size_t peak_total() const { return peak_total_.load(); }
  // Restarts peak tracking from the current values.
  void reset_peaks();

 private:
  static size_t index(MemTag tag) { return static_cast<size_t>(tag); }
  std::array<std::atomic<size_t>, kNumMemTags> current_{};
  std::array<std::atomic<size_t>, kNumMemTags> peak_{};
  std::atomic<size_t> total_{0};
  std::atomic<size_t> peak_total_{0};
};

// Peak resident set size of this process in bytes (VmHWM), 0 if unavailable.
size_t process_peak_rss_bytes();
size_t process_current_rss_bytes();

}  // namespace ndt
