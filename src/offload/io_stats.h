// What offload moved and waited for, counted over the process (one rank): bytes read
// from and written to swap files, and the seconds the compute thread spent blocked on
// I/O it needed (a wait that found its request finished costs nothing). The trainer
// records each step's difference (metrics.jsonl "io"); the benchmarks read them too.
#pragma once

#include <cstdint>

namespace ndt::offload {

struct IoCounters {
  int64_t read_bytes = 0;
  int64_t write_bytes = 0;
  int64_t reads = 0;   // requests
  int64_t writes = 0;
  double wait_seconds = 0;
  IoCounters operator-(const IoCounters& earlier) const;
};

IoCounters io_counters();  // a snapshot
void count_io(bool write, int64_t bytes);
void count_io_wait(double seconds);

}  // namespace ndt::offload
