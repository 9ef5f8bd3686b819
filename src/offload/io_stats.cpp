#include "offload/io_stats.h"

#include <atomic>

namespace ndt::offload {

namespace {
std::atomic<int64_t> g_read_bytes{0}, g_write_bytes{0}, g_reads{0}, g_writes{0};
std::atomic<int64_t> g_wait_ns{0};
}  // namespace

IoCounters IoCounters::operator-(const IoCounters& e) const {
  return {read_bytes - e.read_bytes, write_bytes - e.write_bytes, reads - e.reads, writes - e.writes,
          wait_seconds - e.wait_seconds};
}

IoCounters io_counters() {
  return {g_read_bytes.load(), g_write_bytes.load(), g_reads.load(), g_writes.load(),
          static_cast<double>(g_wait_ns.load()) * 1e-9};
}

void count_io(bool write, int64_t bytes) {
  (write ? g_write_bytes : g_read_bytes).fetch_add(bytes);
  (write ? g_writes : g_reads).fetch_add(1);
}

void count_io_wait(double seconds) { g_wait_ns.fetch_add(static_cast<int64_t>(seconds * 1e9)); }

}  // namespace ndt::offload
