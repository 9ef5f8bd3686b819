#include "plan/calibration.h"

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/system_memory.h"
#include "kernels/kernels.h"
#include "plan/compute_time.h"
#include "plan/run_command.h"
#include "train/peak_flops.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace ndt {

namespace {

// The mean seconds of `f`, called at least `min_calls` times and for at least 50 ms in
// all, each call after `before` (untimed) where given. The mean, not the median: a step
// is a sum of many kernels and collectives, so on a shared machine it takes their
// expected time, the waits for a descheduled thread included.
double mean_seconds(const std::function<void()>& f, int min_calls = 3, const std::function<void()>& before = {}) {
  int calls = 0;
  double total = 0;
  while (calls < min_calls || (total < 0.05 && calls < 1000)) {
    if (before) before();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ++calls;
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return total / calls;
}

// The GEMM sizes measured: m = 4s rows (tokens), n = k = s (a layer's width).
constexpr std::array<int, 5> kGemmWidths = {32, 64, 128, 256, 512};

// Layers a GEMM or attention figure cycles through, each with its own operands, as a
// model's layers do: a run's kernel finds its weights and activations where the layers
// before it left them (out of the core's cache once the layers' operands outgrow it), not
// where the same call left them. Repeating one layer's GEMMs read 8-9% faster than
// cycling 16 layers' on the development VM, two ranks at once (docs/planner.md,
// 2026-12-07). At width 512 the 16 layers hold 168 MB per rank, about AdamW's 128 MiB
// below; the attention's at sequence length 512, 192 MB.
constexpr int kLayers = 16;

// The attention core's sequence lengths measured, over 1024 tokens each (8 sequences at
// 128): its rate falls with shorter sequences (more, smaller blocks per token).
constexpr std::array<int, 5> kAttentionLengths = {32, 64, 128, 256, 512};

// Passes through the kernels' measurements (calibrate_ranks).
constexpr int kPasses = 5;

}  // namespace

CalibrationLayer::CalibrationLayer(int width)
    : s(width),
      x(4 * static_cast<size_t>(width) * width, 0.01f),
      w(static_cast<size_t>(width) * width, 1.0f / static_cast<float>(width)),
      y(4 * static_cast<size_t>(width) * width, 0.0f),
      dw(static_cast<size_t>(width) * width, 0.0f) {}

void CalibrationLayer::forward_and_backward() {
  const int m = 4 * s;
  kernels::gemm(false, true, m, s, s, 1.0f, x.data(), s, w.data(), s, 0.0f, y.data(), s);
  kernels::gemm(false, false, m, s, s, 1.0f, y.data(), s, w.data(), s, 0.0f, x.data(), s);
  kernels::gemm(true, false, s, s, m, 1.0f, y.data(), s, x.data(), s, 0.0f, dw.data(), s);
}

namespace {

// FLOP/s of a linear layer's three GEMMs at width s, kLayers layers in turn.
double linear_layer_flops(int s) {
  std::vector<CalibrationLayer> layers;
  for (int l = 0; l < kLayers; ++l) layers.emplace_back(s);
  const double seconds = mean_seconds([&] {
    for (CalibrationLayer& l : layers) l.forward_and_backward();
  }, 1);  // one call is kLayers repeats already
  const double m = 4.0 * s;
  return kLayers * 3 * 2.0 * m * s * s / seconds;
}

// FLOP/s of the causal attention core forward and backward over 1024 tokens in
// sequences of T, 4 heads of 32, counted as the planner counts them (12 x width x T per
// token), kLayers layers' operands in turn, as the GEMMs' and for the same reason: one
// layer's repeated read 44-61 GFLOP/s on the development VM where 16 layers' in turn read
// 34-48, two processes at once, and the runs' attention read 19-27% above the figure of
// one (docs/planner.md).
double attention_flops(int T) {
  const int B = 1024 / T, NH = 4, HS = 32;
  const size_t n = static_cast<size_t>(B) * T * NH * HS;
  struct Layer {
    std::vector<float> q, k, v, out, dout, dq, dk, dv, lse, att;
  };
  std::vector<Layer> layers;
  for (int l = 0; l < kLayers; ++l) {
    layers.push_back({std::vector<float>(n, 0.1f), std::vector<float>(n, 0.2f), std::vector<float>(n, 0.3f),
                      std::vector<float>(n), std::vector<float>(n, 0.01f), std::vector<float>(n), std::vector<float>(n),
                      std::vector<float>(n), std::vector<float>(static_cast<size_t>(B) * NH * T),
                      std::vector<float>(static_cast<size_t>(B) * NH * T * T)});
  }
  const double seconds = mean_seconds([&] {
    for (Layer& a : layers) {
      kernels::attention_forward(a.out.data(), a.lse.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), nullptr,
                                 B, T, NH, NH, HS);
      kernels::attention_backward(a.dq.data(), a.dk.data(), a.dv.data(), a.dout.data(), a.q.data(), a.k.data(),
                                  a.v.data(), a.att.data(), nullptr, B, T, NH, NH, HS);
    }
  }, 1);  // one call is kLayers layers already
  return kLayers * 12.0 * NH * HS * T * B * T / seconds;
}

// Bytes per second through layer norm (width 128) and GELU (width 512) forward and
// backward over 4096 rows: each reads and writes its activations (5 tensors of a width).
double elementwise_bytes_per_s() {
  const int N = 4096, C = 128;
  const size_t nc = static_cast<size_t>(N) * C;
  std::vector<float> x(nc, 0.5f), out(nc), dx(nc), dout(nc, 0.01f), weight(C, 1.0f), bias(C, 0.0f), dweight(C), dbias(C);
  std::vector<float> mean(N), rstd(N), h(4 * nc, 0.3f), g(4 * nc), dh(4 * nc), dg(4 * nc, 0.01f);
  const double seconds = mean_seconds([&] {
    kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C, 1e-5f);
    kernels::layernorm_backward(dx.data(), dweight.data(), dbias.data(), dout.data(), x.data(), weight.data(), mean.data(),
                                rstd.data(), N, C);
    kernels::gelu_forward(g.data(), h.data(), static_cast<int64_t>(h.size()));
    kernels::gelu_backward(dh.data(), h.data(), dg.data(), static_cast<int64_t>(h.size()));
  });
  return 5.0 * 4 * (nc + 4 * nc) / seconds;
}

// Bytes per second AdamW moves over 8M parameters (128 MiB of fp32 state): its 28 bytes
// per parameter read and written over its time, each call after a 64 MiB copy has moved
// other data through the caches, as a run's forward and backward do before its update.
// Repeated back to back, AdamW ran from the cache: 74 GB/s on one rank of two threads of
// the development VM (260 MiB of L3), against 38-39 after a copy of 64 to 512 MiB and a
// profiled step's 27 with the gradient norm (docs/planner.md, "The step by parts").
double optimizer_bytes_per_s() {
  const size_t n = size_t{8} << 20, evicting = size_t{64} << 20;
  std::vector<float> param(n, 0.5f), grad(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  std::vector<char> from(evicting, 1), to(evicting, 0);
  kernels::AdamWStep s{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0};
  return 28.0 * static_cast<double>(n) / mean_seconds(
                                             [&] {
                                               ++s.t;
                                               kernels::adamw_update(param.data(), grad.data(), m.data(), v.data(),
                                                                     static_cast<int64_t>(n), s);
                                             },
                                             3, [&] { std::memcpy(to.data(), from.data(), evicting); });
}

// Bytes per second one rank copies (64 MiB; the copy's size over its time).
double copy_bytes_per_s() {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  return static_cast<double>(bytes) / mean_seconds([&] { std::memcpy(b.data(), a.data(), bytes); });
}

// The mean seconds of one all-reduce of `floats` floats on the world, over `calls` calls
// (a fixed count: every rank must make the same calls).
double all_reduce_seconds(Communicator& world, size_t floats, int calls) {
  std::vector<float> data(floats, 1.0f);
  world.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) world.all_reduce(data.data(), floats, DType::f32, ReduceOp::sum);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

// The wire sizes per rank the collectives are timed at: from a loss or a flag, through a
// tensor-parallel layer's few hundred KiB, to a data-parallel bucket's megabytes.
constexpr std::array<double, 6> kCollectiveWireBytes = {64, 4096, 65536, 524288, 4194304, 16777216};

// One call of `kind` on the world over buffers that put about `wire` bytes per rank on
// the wire (the counters' volume: comm/communicator.h).
struct TimedCall {
  CommOp op;
  size_t floats;  // the payload
};
TimedCall timed_call(TimedCollective kind, double wire, int ranks) {
  const double n = ranks, per_payload_byte = kind == TimedCollective::all_reduce ? 2 * (n - 1) / n : (n - 1) / n;
  const size_t blocks = static_cast<size_t>(std::max(1.0, std::round(wire / per_payload_byte / 4 / n)));
  const CommOp ops[] = {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather, CommOp::all_to_all_v};
  return {ops[static_cast<size_t>(kind)], blocks * static_cast<size_t>(ranks)};
}

// Each timed kind's table on the world: per size the mean over calls (as many as fit in
// about 8 MiB of wire, 3 to 50) after a barrier, the slowest rank's, keyed by the wire
// bytes the counters recorded per call.
std::array<std::vector<CollectiveCallPoint>, kNumTimedCollectives> time_collectives(Communicator& world) {
  const int n = world.size();
  std::array<std::vector<CollectiveCallPoint>, kNumTimedCollectives> tables;
  for (size_t k = 0; k < kNumTimedCollectives; ++k) {
    for (double wire : kCollectiveWireBytes) {
      const TimedCall call = timed_call(static_cast<TimedCollective>(k), wire, n);
      const int calls = static_cast<int>(std::clamp(8.0 * (1 << 20) / wire, 3.0, 50.0));
      std::vector<float> send(call.floats, 1.0f), recv(call.floats, 0.0f);
      const std::vector<size_t> counts(static_cast<size_t>(n), call.floats / static_cast<size_t>(n));
      const int64_t wire_before = world.stats()[call.op].wire_bytes;
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) {
        switch (call.op) {
          case CommOp::all_reduce: world.all_reduce(send.data(), call.floats, DType::f32, ReduceOp::sum); break;
          case CommOp::reduce_scatter:
            world.reduce_scatter(send.data(), recv.data(), counts[0], DType::f32, ReduceOp::sum);
            break;
          case CommOp::all_gather: world.all_gather(send.data(), recv.data(), counts[0], DType::f32); break;
          default: world.all_to_all_v(send.data(), counts, recv.data(), counts, DType::f32); break;
        }
      }
      float seconds = static_cast<float>(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
      const double wire_per_call = static_cast<double>(world.stats()[call.op].wire_bytes - wire_before) / calls;
      world.all_reduce(&seconds, 1, DType::f32, ReduceOp::max);
      tables[k].push_back({wire_per_call, seconds});
    }
  }
  return tables;
}

}  // namespace

void keep_slowest_rank(Communicator& world, std::vector<float>& rates) {
  world.all_reduce(rates.data(), rates.size(), DType::f32, ReduceOp::min);
}

void calibrate_ranks(const std::string& out) {
  MpiRuntime mpi;
  const std::unique_ptr<MpiCommunicator> world = mpi_world();
  const int ranks = world->size();
  const bool lead = world->rank() == 0;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = std::max(1, cores / ranks);  // a run's automatic thread count (runtime.threads = 0)
  kernels::set_num_threads(threads);
  const auto step = [&](const char* what) {
    world->barrier();  // the ranks measure together, sharing the cores as a run's do
    if (lead) fmt::print("  {}\n", what), std::fflush(stdout);
  };
  // Each figure the mean of kPasses passes through all of them, so that each samples the
  // machine at several moments of a second or more, as a run's median step does (one pass
  // of 50 ms per figure moved by 10-35% from one calibration to the next on a shared VM);
  // in each pass the slowest rank's figure (keep_slowest_rank). The FMA loop too: a
  // validation divides each prediction by the run's FMA loop over this one (its load
  // factor), so this one must sample the moments the kernels' figures did. Measured once
  // before the passes, a 0.2 s slow moment read 113 GFLOP/s per rank where the runs read
  // 198-225, and the 2-rank predictions came out 1.4-1.9x too fast (docs/planner.md).
  std::vector<double> figures;  // a pass's figures in their order, each summed over the passes
  for (int pass = 1; pass <= kPasses; ++pass) {
    step(fmt::format("pass {} of {}: FMA loop, GEMMs of widths 32 to 512 (forward, input and weight gradients), "
                     "attention core at sequence lengths 32 to 512, layer norm and GELU, AdamW, memory copy",
                     pass, kPasses)
             .c_str());
    std::vector<float> pass_figures = {static_cast<float>(measure_fma_peak_together(threads, *world))};
    for (int s : kGemmWidths) pass_figures.push_back(static_cast<float>(linear_layer_flops(s)));
    for (int T : kAttentionLengths) pass_figures.push_back(static_cast<float>(attention_flops(T)));
    for (double f : {elementwise_bytes_per_s(), optimizer_bytes_per_s(), copy_bytes_per_s()}) {
      pass_figures.push_back(static_cast<float>(f));
    }
    keep_slowest_rank(*world, pass_figures);
    figures.resize(pass_figures.size(), 0.0);
    for (size_t i = 0; i < figures.size(); ++i) figures[i] += pass_figures[i] / kPasses;
  }
  // Every rank must take the same branch (it holds a barrier): native only where all are.
  float fallback_somewhere = kernels::lowp_gemm_backend(DType::bf16).starts_with("oneDNN") ? 0.0f : 1.0f;
  world->all_reduce(&fallback_somewhere, 1, DType::f32, ReduceOp::max);
  const bool native_bf16 = fallback_somewhere == 0.0f;
  if (native_bf16) step("bf16 GEMM 2048^3");
  figures.push_back(native_bf16 ? resolve_peak_flops(0, threads, DType::bf16).flops_per_s : 0.0);
  // The mean over the ranks, exchanged as floats (figures up to 1e15 keep 7 digits): the
  // bf16 GEMM's; the others are the same on every rank already.
  std::vector<float> mean(figures.begin(), figures.end());
  world->all_reduce(mean.data(), mean.size(), DType::f32, ReduceOp::avg);
  step("MPI all-reduce, 1 float and 4 MiB");
  const double call_s = ranks > 1 ? all_reduce_seconds(*world, 1, 200) : 0;
  const double big_s = ranks > 1 ? all_reduce_seconds(*world, size_t{1} << 20, 9) : 0;
  std::array<std::vector<CollectiveCallPoint>, kNumTimedCollectives> collective_calls;
  if (ranks > 1) {
    step("MPI all-reduce, reduce-scatter, all-gather and all-to-all by size, 64 B to 16 MiB per rank");
    collective_calls = time_collectives(*world);
  }
  if (!lead) return;

  size_t i = 0;
  const double fma = mean[i++];
  // The peak: the FMA loop, or a GEMM that beat it (measured moments apart on a shared
  // machine), so that every efficiency is a share of it.
  const double fastest_gemm = *std::max_element(mean.begin() + 1, mean.begin() + 1 + kGemmWidths.size());
  DeviceProfile d;
  d.name = fmt::format("cpu-{}-ranks", ranks);
  d.memory_bytes = physical_memory_bytes() / ranks;
  d.peak_fp32 = std::max(fma, fastest_gemm);
  d.fma_flops_per_s = fma;
  for (int s : kGemmWidths) {
    d.gemm_efficiency_by_size.push_back({std::cbrt(4.0 * s * s * s), mean[i++] / d.peak_fp32});
  }
  d.gemm_efficiency = d.gemm_efficiency_by_size.back().efficiency;
  for (int T : kAttentionLengths) d.attention_by_length.push_back({static_cast<double>(T), mean[i++]});
  d.attention_flops_per_s = attention_flops_at(d, 128);
  d.elementwise_bytes_per_s = mean[i++];
  d.optimizer_bytes_per_s = mean[i++];
  d.memory_bytes_per_s = mean[i++];
  d.peak_bf16 = std::max(d.peak_fp32, static_cast<double>(mean[i++]));
  // Every figure read once, in the order measured (a count kept by hand here once read a
  // float past a pass's figures as the bf16 peak, and never read the bf16 GEMM's).
  NDT_CHECK(i == mean.size(), "calibration: {} figures measured, {} read", mean.size(), i);
  d.devices_per_node = ranks;
  d.oversubscription = std::max(1.0, static_cast<double>(ranks) * threads / cores);
  // One rank: no messages; the link is what a copy in and out would take.
  const double wire = 2.0 * (ranks - 1) / ranks * 4 * (size_t{1} << 20);
  d.intra_node = ranks > 1 ? LinkProfile{wire / std::max(big_s - call_s, 1e-9), 0, call_s}
                           : LinkProfile{d.memory_bytes_per_s / 2, 0, 0};
  d.collective_calls = collective_calls;
  d.inter_node = d.intra_node;  // one machine
  d.inter_node_links = 1;
  d.overlaps_communication = false;
  d.validate();
  const std::string comment = fmt::format(
      "ndtrain plan --calibrate: {} rank{} of this machine ({} cores, {} thread{} per rank), measured at once.\n"
      "FMA loop {:.1f} GFLOP/s per rank; GEMM efficiency by size below; attention core {:.1f} GFLOP/s at 128\n"
      "tokens (by sequence length below); "
      "layer norm and GELU {:.2f} GB/s;\nAdamW {:.2f} GB/s; copy {:.2f} GB/s; bf16 GEMM {};\n"
      "all-reduce {:.1f} us per call, {:.2f} GB/s of wire bytes{}.",
      ranks, ranks == 1 ? "" : "s", cores, threads, threads == 1 ? "" : "s", fma / 1e9, d.attention_flops_per_s / 1e9,
      d.elementwise_bytes_per_s / 1e9, d.optimizer_bytes_per_s / 1e9, d.memory_bytes_per_s / 1e9,
      native_bf16 ? fmt::format("{:.1f} GFLOP/s ({})", d.peak_bf16 / 1e9, kernels::lowp_gemm_backend(DType::bf16))
                  : std::string("not native (the fp32 peak)"),
      d.intra_node.call_s * 1e6, d.intra_node.bytes_per_s / 1e9,
      ranks > 1 ? "; each kind's call in microseconds by its wire bytes per rank below" : "");
  const std::string text = device_file_text(d, comment);
  AtomicFile file(out);
  file.write(text.data(), text.size());
  file.commit();
  fmt::print("{}", text);
}

DeviceProfile run_calibration(int ranks, const std::string& out) {
  NDT_CHECK(ranks >= 1 && ranks <= 1024, "--ranks {} must lie in [1, 1024]", ranks);
  fmt::print("calibrating the step-time model on {} rank{} of this machine into {}\n", ranks, ranks == 1 ? "" : "s", out);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  run_command(this_binary_on_ranks(ranks) + " plan --calibrate-rank --out " + shell_quoted(out), true);
  fmt::print("calibrated in {:.1f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return load_device_profile(out);
}

}  // namespace ndt
