// Memory ledger: every tensor allocation is tagged, so current and peak bytes per
// tag (per rank: one rank is one process) can be reported and tested against theory.
// A second tier counts what lives on disk instead (offload, docs/offload.md: swap
// files of parameters, gradients and optimizer states), per tag, beside the resident
// bytes: resident + on disk is a tag's whole footprint. Each device has its own ledger
// with the same tags (instance() is the host's; for_device(Device::cuda) a GPU's).
#pragma once

#include "core/device.h"

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
  static MemoryLedger& instance();  // the host's: for_device(Device::cpu)
  static MemoryLedger& for_device(Device device);

  void on_alloc(MemTag tag, size_t bytes);
  void on_free(MemTag tag, size_t bytes);

  size_t current(MemTag tag) const { return current_[index(tag)].load(); }
  size_t peak(MemTag tag) const { return peak_[index(tag)].load(); }
  size_t current_total() const { return total_.load(); }
  // Peak of the sum over tags (not the sum of per-tag peaks).
  size_t peak_total() const { return peak_total_.load(); }
  // Restarts peak tracking from the current values (the disk tier's too).
  void reset_peaks();

  // The disk tier: bytes of swap files holding a tag's values (offload).
  void on_disk_alloc(MemTag tag, size_t bytes);
  void on_disk_free(MemTag tag, size_t bytes);
  size_t disk_current(MemTag tag) const { return disk_current_[index(tag)].load(); }
  size_t disk_peak(MemTag tag) const { return disk_peak_[index(tag)].load(); }
  size_t disk_current_total() const;

 private:
  static size_t index(MemTag tag) { return static_cast<size_t>(tag); }
  std::array<std::atomic<size_t>, kNumMemTags> current_{};
  std::array<std::atomic<size_t>, kNumMemTags> peak_{};
  std::atomic<size_t> total_{0};
  std::atomic<size_t> peak_total_{0};
  std::array<std::atomic<size_t>, kNumMemTags> disk_current_{};
  std::array<std::atomic<size_t>, kNumMemTags> disk_peak_{};
};

// Peak resident set size of this process in bytes (VmHWM), 0 if unavailable.
size_t process_peak_rss_bytes();
size_t process_current_rss_bytes();

}  // namespace ndt
