#include "core/memory.h"

#include <array>
#include <fstream>
#include <string>

namespace ndt {

std::string_view mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::params: return "params";
    case MemTag::grads: return "grads";
    case MemTag::optimizer: return "optimizer";
    case MemTag::activations: return "activations";
    case MemTag::comm: return "comm";
    case MemTag::other: return "other";
  }
  return "?";
}

MemoryLedger& MemoryLedger::instance() { return for_device(Device::cpu); }

MemoryLedger& MemoryLedger::for_device(Device device) {
  static std::array<MemoryLedger, kNumDevices> ledgers;
  return ledgers[static_cast<size_t>(device)];
}

static void raise_to(std::atomic<size_t>& peak, size_t value) {
  size_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

void MemoryLedger::on_alloc(MemTag tag, size_t bytes) {
  raise_to(peak_[index(tag)], current_[index(tag)].fetch_add(bytes) + bytes);
  raise_to(peak_total_, total_.fetch_add(bytes) + bytes);
}

void MemoryLedger::on_free(MemTag tag, size_t bytes) {
  current_[index(tag)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

void MemoryLedger::reset_peaks() {
  for (size_t i = 0; i < kNumMemTags; ++i) {
    peak_[i].store(current_[i].load());
    disk_peak_[i].store(disk_current_[i].load());
  }
  peak_total_.store(total_.load());
}

void MemoryLedger::on_disk_alloc(MemTag tag, size_t bytes) {
  raise_to(disk_peak_[index(tag)], disk_current_[index(tag)].fetch_add(bytes) + bytes);
}

void MemoryLedger::on_disk_free(MemTag tag, size_t bytes) { disk_current_[index(tag)].fetch_sub(bytes); }

size_t MemoryLedger::disk_current_total() const {
  size_t total = 0;
  for (const auto& bytes : disk_current_) total += bytes.load();
  return total;
}

static size_t read_status_kb(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string word;
  while (status >> word) {
    if (word == key) {
      size_t kb = 0;
      status >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

size_t process_peak_rss_bytes() { return read_status_kb("VmHWM:"); }
size_t process_current_rss_bytes() { return read_status_kb("VmRSS:"); }

}  // namespace ndt
