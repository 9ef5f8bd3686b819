// `ndtrain bench offload` (docs/offload.md, docs/performance.md), three parts:
//   io        the disk as offload moves swap files: io_uring against a thread pool of
//             blocking pread/pwrite, both O_DIRECT, at several chunk sizes and depths,
//             the backends alternating, medians over --rounds;
//   overhead  a model that fits in memory trained in memory and with its optimizer on
//             disk (ZeRO-1 on one rank), step by step in turn: the step time, the bytes
//             moved and the I/O wait;
//   capacity  the largest Llama-shaped model that trains here in memory, and with the
//             optimizer, parameters and gradients on disk (FSDP on one rank), chosen by
//             the memory model within --memory-gib of memory and --disk-gib of disk,
//             then trained for --capacity-steps steps each: step time against the I/O
//             time at the measured bandwidth, and the I/O wait.
// Writes: swap files and probes under --dir, removed at the end.
#include "apps/ndtrain/commands.h"
#include "apps/ndtrain/synthetic_rows.h"
#include "core/memory.h"
#include "core/timing.h"
#include "kernels/cpu/threads.h"
#include "offload/disk_bandwidth.h"
#include "offload/io_stats.h"
#include "parallel/data/offloaded_moments.h"
#include "parallel/offload_model.h"
#include "train/training_model.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace ndt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Seconds of CPU this process (all its threads, io_uring's workers included) has used.
double cpu_seconds() {
  rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// The optimizer step's stream alone (offload/chunk_stream.h through OffloadedMoments):
// `elements` moments in 4 MiB chunks, 2 read ahead, parameters and gradients in memory.
// Seconds per step after a first one that writes the moments.
double streamed_step(const OffloadBenchOptions& o, offload::IoBackend backend, int64_t elements) {
  offload::OffloadOptions opts;
  opts.optimizer = true, opts.dir = o.dir, opts.backend = backend;
  offload::SwapSpace space(opts);
  OffloadedMoments moments(space, offload::SwapLayout({{0, elements}}, opts.chunk_elements()));
  std::vector<float> params(static_cast<size_t>(elements), 0.1f), grads(static_cast<size_t>(elements), 0.01f);
  const std::vector<AdamWSegment> segments = {{0, 0, elements, 0.1f}};
  const OffloadedMoments::Sources sources{[&](size_t) { return params.data(); }, grads.data(), nullptr, nullptr};
  kernels::AdamWStep step{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
  moments.step(segments, sources, step);
  const auto t0 = std::chrono::steady_clock::now();
  step.t = 2;
  moments.step(segments, sources, step);
  return seconds_since(t0);
}

void bench_io(const OffloadBenchOptions& o) {
  const int64_t bytes = static_cast<int64_t>(o.probe_gib * kGiB);
  const std::vector<std::pair<int64_t, int>> shapes = {{64 << 10, 32}, {1 << 20, 8}, {4 << 20, 8}, {16 << 20, 4}};
  const std::vector<offload::IoBackend> backends = {offload::IoBackend::io_uring, offload::IoBackend::threads};
  std::map<std::pair<size_t, size_t>, std::vector<double>> writes, reads, cpu;
  std::vector<std::vector<double>> stream(backends.size());
  const int64_t moments = bytes / 8;  // the stream moves as many bytes each way as a probe
  fmt::print("io: {:.2f} GiB written, rewritten and read back per probe under {} (O_DIRECT where allowed), and the "
             "optimizer's stream of {:.0f}M moments each way; backends alternating, {} rounds\n",
             o.probe_gib, o.dir, static_cast<double>(moments) / 1e6, o.rounds);
  bool direct = false;
  for (int r = 0; r < o.rounds; ++r) {
    for (size_t k = 0; k < backends.size(); ++k) {
      const size_t b = (k + static_cast<size_t>(r)) % backends.size();  // alternate which goes first
      for (size_t s = 0; s < shapes.size(); ++s) {
        const double c0 = cpu_seconds();
        const offload::DiskBandwidth d =
            offload::measure_disk_bandwidth(o.dir, bytes, shapes[s].first, backends[b], shapes[s].second);
        cpu[{s, b}].push_back((cpu_seconds() - c0) / (3.0 * static_cast<double>(bytes) / 1e9));
        direct = d.direct;
        writes[{s, b}].push_back(d.write_bytes_per_s / 1e9);
        reads[{s, b}].push_back(d.read_bytes_per_s / 1e9);
      }
      stream[b].push_back(streamed_step(o, backends[b], moments));
    }
  }
  fmt::print("  {:<18} {:>34} {:>34}{}\n", "chunk, in flight", "io_uring write / read, CPU s per GB",
             "threads write / read, CPU s per GB", direct ? "" : "   (page cache: the filesystem refused O_DIRECT)");
  for (size_t s = 0; s < shapes.size(); ++s) {
    fmt::print("  {:>7} KiB, {:>2} {:>15.2f} / {:5.2f} GB/s, {:.3f} {:>15.2f} / {:5.2f} GB/s, {:.3f}\n",
               shapes[s].first / 1024, shapes[s].second, median(writes[{s, 0}]), median(reads[{s, 0}]),
               median(cpu[{s, 0}]), median(writes[{s, 1}]), median(reads[{s, 1}]), median(cpu[{s, 1}]));
  }
  fmt::print("  the optimizer's stream ({:.2f} GB read and as much written): io_uring {:.3f} s, threads {:.3f} s "
             "(medians)\n",
             static_cast<double>(bytes) / 1e9, median(stream[0]), median(stream[1]));
  std::fflush(stdout);
}

// One training step: gradients, norm, update. Seconds in all; *update: of the norm and update.
double train_step(TrainingModel& m, const FetchRows& rows, const RunConfig& c, double* update = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  m.compute_gradients(rows, 1.0f / static_cast<float>(c.batch_size * c.seq_len));
  const auto t1 = std::chrono::steady_clock::now();
  const double norm = m.sync().grad_norm();
  m.sync().step(1e-4f, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f);
  if (update) *update = seconds_since(t1);
  return seconds_since(t0);
}

RunConfig bench_config(const ModelConfig& model, int batch, int seq, int threads, const std::string& dir) {
  RunConfig c;
  c.model = model;
  c.model.max_seq_len = std::max(c.model.max_seq_len, seq);
  c.batch_size = batch, c.seq_len = seq, c.seed = 1, c.threads = threads, c.out_dir = "";
  c.offload_dir = dir;
  return c.resolved(1);
}

void bench_overhead(const OffloadBenchOptions& o) {
  DeviceMesh mesh;
  RunConfig memory = bench_config(ModelConfig::preset(o.preset), o.batch, o.seq_len, o.threads, o.dir);
  memory.zero_stage = 1;
  RunConfig disk = memory;
  disk.offload_optimizer = true;
  TrainingModel a(memory, mesh), b(disk, mesh);
  const FetchRows rows = synthetic_rows(o.seq_len, memory.model.vocab_size);
  fmt::print("overhead: {} ({:.1f}M parameters), B={} T={}, {} threads, ZeRO-1 on one rank: in memory against "
             "offload.optimizer = \"disk\" ({} MiB chunks, {} read ahead), alternating, {} rounds\n",
             o.preset, count_parameters(memory.model) / 1e6, o.batch, o.seq_len, o.threads,
             disk.offload_chunk_mb, disk.offload_prefetch, o.rounds);
  train_step(a, rows, memory), train_step(b, rows, disk);  // warm-up: first touch, moments written once
  std::vector<double> in_memory, offloaded, update_memory, update_disk, wait, moved;
  for (int r = 0; r < o.rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      double update = 0;
      if ((k + r) % 2 == 0) {
        in_memory.push_back(train_step(a, rows, memory, &update));
        update_memory.push_back(update);
        continue;
      }
      const offload::IoCounters before = offload::io_counters();
      offloaded.push_back(train_step(b, rows, disk, &update));
      update_disk.push_back(update);
      const offload::IoCounters io = offload::io_counters() - before;
      wait.push_back(io.wait_seconds), moved.push_back(static_cast<double>(io.read_bytes + io.write_bytes));
    }
    fmt::print("  round {}: in memory {:.3f} s (norm and update {:.3f} s), offloaded {:.3f} s ({:.3f} s; I/O {:.2f} "
               "GB, waited {:.3f} s)\n",
               r, in_memory.back(), update_memory.back(), offloaded.back(), update_disk.back(), moved.back() / 1e9,
               wait.back());
    std::fflush(stdout);
  }
  const double m = median(in_memory), d = median(offloaded);
  fmt::print("  median: in memory {:.3f} s, optimizer on disk {:.3f} s: {:+.1f}%; the norm and update {:.3f} s against "
             "{:.3f} s; I/O wait {:.3f} s ({:.1f}% of the step), {:.2f} GB moved per step\n",
             m, d, 100 * (d / m - 1), median(update_memory), median(update_disk), median(wait), 100 * median(wait) / d,
             median(moved) / 1e9);
}

}  // namespace

int run_bench_offload(const OffloadBenchOptions& o) {
  NDT_CHECK(!launched_by_mpi(), "bench offload runs in one process: start it without mpirun");
  NDT_CHECK(o.rounds > 0, "--rounds {} must be positive", o.rounds);
  NDT_CHECK(o.part == "io" || o.part == "overhead" || o.part == "capacity" || o.part == "all",
            "--part \"{}\" is not io, overhead, capacity or all", o.part);
  cpu::set_num_threads(o.threads);
  std::filesystem::create_directories(o.dir);
  if (o.part == "io" || o.part == "all") bench_io(o);
  if (o.part == "overhead" || o.part == "all") bench_overhead(o);
  if (o.part == "capacity" || o.part == "all") bench_offload_capacity(o);
  return 0;
}

}  // namespace ndt
