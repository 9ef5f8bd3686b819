// `ndtrain bench offload --part capacity` (apps/ndtrain/bench_offload.cpp): the largest
// Llama-shaped model (d_model a multiple of 512, heads of 128, a quarter of them K/V
// heads, SwiGLU of 8/3 d_model, a 32000-token vocabulary, untied, d_model / 256 to
// d_model / 64 layers: Llama's d_model / 128 within a factor 2) whose predicted memory
// fits --memory-gib in memory (DDP on one rank: 16 bytes a parameter and the
// activations), and with offload (FSDP on one rank, optimizer, parameters and gradients
// on disk: the offload model's resident peak, the activations and FSDP's communication
// buffers) within --memory-gib of memory and --disk-gib of disk; each then trained to
// confirm it, the offloaded one also at a batch whose compute outweighs its I/O.
#include "apps/ndtrain/commands.h"
#include "apps/ndtrain/synthetic_rows.h"
#include "core/memory.h"
#include "core/system_memory.h"
#include "core/timing.h"
#include "offload/disk_bandwidth.h"
#include "offload/io_stats.h"
#include "parallel/offload_model.h"
#include "train/training_model.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace ndt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelConfig llama_shape(int d_model, int layers, int seq) {
  ModelConfig m = ModelConfig::preset("llama-small");
  m.d_model = d_model, m.n_layer = layers, m.max_seq_len = seq;
  m.n_head = d_model / 128, m.n_kv_head = std::max(1, m.n_head / 4);
  m.d_ff = (8 * d_model / 3 + 255) / 256 * 256;
  return m;
}

struct Candidate {
  ModelConfig model;
  int64_t params = 0;
  double memory = 0, disk = 0;  // predicted bytes
};

// The predicted memory (and disk) of training `m` at B x T in memory, or offloaded.
Candidate predict(const ModelConfig& m, bool offloaded, int batch, int seq) {
  Candidate c{m, count_parameters(m), 0, 0};
  const double activations = static_cast<double>(Transformer::predict_activation_bytes(m, batch, seq, 256));
  const std::vector<ParameterSpec> specs = model_parameter_specs(m);
  if (!offloaded) {
    c.memory = static_cast<double>(predict_model_states(specs, 1, 0).total()) + activations;
    return c;
  }
  OffloadSettings o;
  o.optimizer = o.params = true;
  const TieredStates t = predict_tiered_states(specs, 1, 3, o);
  // FSDP's buffers on one rank: a gather and a reduce-scatter of the largest group in
  // flight, send and receive each (the root: the embedding and the output layer).
  const double root = 4.0 * 2 * static_cast<double>(m.vocab_size) * m.d_model;
  c.memory = static_cast<double>(t.peak.total()) + activations + 4 * root;
  c.disk = static_cast<double>(t.disk.total());
  return c;
}

Candidate largest(bool offloaded, int batch, int seq, double memory, double disk) {
  Candidate best;
  for (int d = 1024; d <= 8192; d += 512) {  // heads of 128, a multiple of 4 of them
    for (int layers = std::max(1, d / 256); layers <= d / 64; ++layers) {  // Llama's depths: d_model / 128 +- 2x
      const Candidate c = predict(llama_shape(d, layers, seq), offloaded, batch, seq);
      if (c.memory > memory || c.disk > disk) break;
      if (c.params > best.params) best = c;
    }
  }
  NDT_CHECK(best.params > 0, "bench offload: no Llama shape fits {:.1f} GiB of memory", memory / kGiB);
  return best;
}

// Trains `steps` steps; prints each and the medians after the first.
void train(const Candidate& c, bool offloaded, int batch, int seq, int steps, const OffloadBenchOptions& o,
           double bandwidth) {
  RunConfig config;
  config.model = c.model;
  config.batch_size = batch, config.seq_len = seq, config.seed = 1, config.threads = o.threads, config.out_dir = "";
  config.offload_dir = o.dir;
  if (offloaded) config.zero_stage = 3, config.offload_optimizer = config.offload_params = true;
  config = config.resolved(1);
  DeviceMesh mesh;
  MemoryLedger& ledger = MemoryLedger::instance();
  ledger.reset_peaks();
  const auto t0 = std::chrono::steady_clock::now();
  TrainingModel model(config, mesh);
  fmt::print("  {} ({:.3f}B parameters, d_model {}, {} layers), B={} T={}: built in {:.1f} s\n",
             offloaded ? "offloaded" : "in memory", c.params / 1e9, c.model.d_model, c.model.n_layer, batch, seq,
             seconds_since(t0));
  std::fflush(stdout);
  const FetchRows rows = synthetic_rows(seq, c.model.vocab_size);
  std::vector<double> times, waits, moved;
  for (int s = 0; s < steps; ++s) {
    const offload::IoCounters before = offload::io_counters();
    const auto t1 = std::chrono::steady_clock::now();
    model.compute_gradients(rows, 1.0f / static_cast<float>(batch * seq));
    const double norm = model.sync().grad_norm();
    model.sync().step(1e-5f, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f);
    const double seconds = seconds_since(t1);
    const offload::IoCounters io = offload::io_counters() - before;
    fmt::print("    step {}: {:.2f} s, I/O {:.2f} GB read + {:.2f} GB written, waited {:.2f} s\n", s + 1, seconds,
               io.read_bytes / 1e9, io.write_bytes / 1e9, io.wait_seconds);
    std::fflush(stdout);
    if (s == 0 && steps > 1) continue;  // the first step reads no moments (never written)
    times.push_back(seconds), waits.push_back(io.wait_seconds);
    moved.push_back(static_cast<double>(io.read_bytes + io.write_bytes));
  }
  const double step = median(times), io_s = median(moved) / bandwidth;
  fmt::print("    median step {:.2f} s: ledger peak {:.2f} GiB (predicted {:.2f}), disk {:.2f} GiB (predicted {:.2f}); "
             "I/O {:.1f} GB = {:.1f} s at the measured {:.2f} GB/s, compute and the rest {:.1f} s; I/O wait {:.2f} s "
             "({:.1f}% of the step)\n",
             step, ledger.peak_total() / kGiB, c.memory / kGiB, ledger.disk_current_total() / kGiB, c.disk / kGiB,
             median(moved) / 1e9, io_s, bandwidth / 1e9, step - median(waits), median(waits),
             100 * median(waits) / step);
  std::fflush(stdout);
}

}  // namespace

void bench_offload_capacity(const OffloadBenchOptions& o) {
  struct statvfs fs {};
  NDT_CHECK(::statvfs(o.dir.c_str(), &fs) == 0, "bench offload: cannot read the free space of {}", o.dir);
  const double memory = o.memory_gib > 0 ? o.memory_gib * kGiB : 0.9 * available_memory_bytes();
  const double disk = o.disk_gib > 0 ? o.disk_gib * kGiB
                                     : 0.5 * static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
  const offload::DiskBandwidth bw =
      offload::measure_disk_bandwidth(o.dir, int64_t{1} << 30, int64_t{4} << 20, offload::IoBackend::io_uring, 8);
  const Candidate in_memory = largest(false, o.capacity_batch, o.capacity_seq, memory, 0);
  const int bigger_batch = std::max(o.capacity_batch, o.compute_batch);
  const Candidate offloaded = largest(true, bigger_batch, o.capacity_seq, memory, disk);
  fmt::print("capacity: memory {:.1f} GiB, disk {:.1f} GiB under {} (write {:.2f} GB/s, read {:.2f} GB/s, mixed {:.2f} "
             "GB/s); largest Llama shape in memory {:.3f}B parameters (d_model {}, {} layers), with offload {:.3f}B "
             "(d_model {}, {} layers): {:.2f}x\n",
             memory / kGiB, disk / kGiB, o.dir, bw.write_bytes_per_s / 1e9, bw.read_bytes_per_s / 1e9,
             bw.mixed_bytes_per_s() / 1e9, in_memory.params / 1e9, in_memory.model.d_model, in_memory.model.n_layer,
             offloaded.params / 1e9, offloaded.model.d_model, offloaded.model.n_layer,
             static_cast<double>(offloaded.params) / static_cast<double>(in_memory.params));
  std::fflush(stdout);
  if (o.capacity_runs.find("memory") != std::string::npos) {
    train(in_memory, false, o.capacity_batch, o.capacity_seq, o.capacity_steps, o, bw.mixed_bytes_per_s());
  }
  if (o.capacity_runs.find("offload") != std::string::npos) {
    train(offloaded, true, o.capacity_batch, o.capacity_seq, o.capacity_steps, o, bw.mixed_bytes_per_s());
    train(offloaded, true, o.compute_batch, o.capacity_seq, o.capacity_steps, o, bw.mixed_bytes_per_s());
  }
}

}  // namespace ndt
