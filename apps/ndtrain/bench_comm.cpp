// `ndtrain bench comm`: collective bandwidth of ndtrain's Communicator next to the raw
// MPI calls on the same buffers, nccl-tests style (algbw = size / time, busbw = algbw x
// the collective's bus factor), so the wrapper's overhead is visible as a ratio.
// `ndtrain bench overlap`: how much of a large all-reduce a compute loop hides, for each
// way of driving MPI progress (none, polling test(), a progress thread, a blocking call
// on a helper thread).
// Both run under mpirun; each rank uses one compute thread.
#include "apps/ndtrain/commands.h"
#include "core/timing.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

namespace ndt {

namespace {

double now() { return MPI_Wtime(); }

double max_over_ranks(MPI_Comm comm, double x) {
  double out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, comm);
  return out;
}

// Each iteration's time as the slowest rank saw it, then the median over iterations.
double median_over_iters(MPI_Comm comm, std::vector<double> t) {
  MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX, comm);
  return median(std::move(t));
}

struct Collective {
  CommOp op;
  double bus_factor;  // busbw / algbw for n ranks
};

}  // namespace

// =============================================================================================
// bench comm

int run_bench_comm(const CommBenchOptions& o) {
  NDT_CHECK(o.min_bytes >= 4 && o.min_bytes <= o.max_bytes, "--min-bytes {} must be at least 4 and at most "
            "--max-bytes {}", o.min_bytes, o.max_bytes);
  NDT_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters {} must be positive and --warmup {} non-negative", o.iters,
            o.warmup);
  NDT_CHECK(o.step_factor >= 2, "--step-factor {} must be at least 2", o.step_factor);
  MpiRuntime mpi;
  cpu::set_num_threads(1);
  auto world = mpi_world();
  const MPI_Comm comm = world->native();
  const int n = world->size(), me = world->rank();
  const double fn = n;
  const std::vector<Collective> collectives = {{CommOp::all_reduce, 2 * (fn - 1) / fn},
                                               {CommOp::reduce_scatter, (fn - 1) / fn},
                                               {CommOp::all_gather, (fn - 1) / fn},
                                               {CommOp::all_to_all, (fn - 1) / fn}};
  if (me == 0) {
    fmt::print("bench comm: {} ranks, f32; ndtrain = Communicator {} calls, raw = MPI_Allreduce, "
               "MPI_Reduce_scatter_block, MPI_Allgather, MPI_Alltoall\non the same buffers and communicator. "
               "size = bytes of the full buffer (reduce_scatter: input, all_gather: output);\n"
               "time = median of {} iterations (each the slowest rank's) after {} warm-up; algbw = size / time;\n"
               "busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for the others (as nccl-tests); "
               "ratio = ndtrain busbw / raw busbw.\n",
               n, o.async ? "non-blocking (i* + wait)" : "blocking", o.iters, o.warmup);
  }
  // Buffers sized for the largest case, zero-filled (sums stay zero: no denormals or infs).
  const size_t max_count = o.max_bytes / 4;
  std::vector<float> a(max_count, 0.0f), b(max_count, 0.0f);

  for (const Collective& c : collectives) {
    if (me == 0) {
      fmt::print("\n{:<15}{:>12}{:>12} | {:>12}{:>9}{:>9} | {:>12}{:>9}{:>9} | {:>6}\n", comm_op_name(c.op),
                 "size (B)", "count", "ndt us", "algbw", "busbw", "raw us", "algbw", "busbw", "ratio");
    }
    double log_ratio_sum = 0;  // over sizes >= 1 MiB, for the summary line
    int ratios = 0;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
      // Whole elements, divisible into n blocks for the collectives that split the buffer.
      size_t count = bytes / 4;
      if (c.op != CommOp::all_reduce) count -= count % n;
      if (count == 0) continue;
      const size_t block = count / n;
      const int nc = static_cast<int>(count), nb = static_cast<int>(block);
      float *x = a.data(), *y = b.data();
      constexpr DType f32 = DType::f32;
      constexpr ReduceOp sum = ReduceOp::sum;
      std::function<void()> blocking, async, raw;
      switch (c.op) {
        case CommOp::all_reduce:
          blocking = [&] { world->all_reduce(x, count, f32, sum); };
          async = [&] { world->iall_reduce(x, count, f32, sum)->wait(); };
          raw = [&] { MPI_Allreduce(MPI_IN_PLACE, x, nc, MPI_FLOAT, MPI_SUM, comm); };
          break;
        case CommOp::reduce_scatter:
          blocking = [&] { world->reduce_scatter(x, y, block, f32, sum); };
          async = [&] { world->ireduce_scatter(x, y, block, f32, sum)->wait(); };
          raw = [&] { MPI_Reduce_scatter_block(x, y, nb, MPI_FLOAT, MPI_SUM, comm); };
          break;
        case CommOp::all_gather:
          blocking = [&] { world->all_gather(x, y, block, f32); };
          async = [&] { world->iall_gather(x, y, block, f32)->wait(); };
          raw = [&] { MPI_Allgather(x, nb, MPI_FLOAT, y, nb, MPI_FLOAT, comm); };
          break;
        default:
          blocking = [&] { world->all_to_all(x, y, block, f32); };
          async = [&] { world->iall_to_all(x, y, block, f32)->wait(); };
          raw = [&] { MPI_Alltoall(x, nb, MPI_FLOAT, y, nb, MPI_FLOAT, comm); };
          break;
      }
      const std::function<void()>& ours = o.async ? async : blocking;
      for (int i = 0; i < o.warmup; ++i) {
        ours();
        raw();
      }
      // Alternate which runs first, each timed alone between barriers. The machine may be
      // shared: per-iteration times (max over ranks) and their median, not the mean.
      std::vector<double> t_ours(o.iters), t_raw(o.iters);
      for (int i = 0; i < o.iters; ++i) {
        for (int k = 0; k < 2; ++k) {
          const bool run_ours = (k == 0) == (i % 2 == 0);
          MPI_Barrier(comm);
          const double t0 = now();
          (run_ours ? ours : raw)();
          (run_ours ? t_ours : t_raw)[i] = now() - t0;
        }
      }
      const double time_ours = median_over_iters(comm, t_ours), time_raw = median_over_iters(comm, t_raw);
      const double size = static_cast<double>(count) * 4;
      const double alg_ours = size / time_ours / 1e9, alg_raw = size / time_raw / 1e9;
      if (count * 4 >= (size_t{1} << 20)) {
        log_ratio_sum += std::log(alg_ours / alg_raw);
        ++ratios;
      }
      if (me == 0) {
        fmt::print("{:<15}{:>12}{:>12} | {:>12.1f}{:>9.3f}{:>9.3f} | {:>12.1f}{:>9.3f}{:>9.3f} | {:>6.3f}\n", "",
                   count * 4, count, time_ours * 1e6, alg_ours, alg_ours * c.bus_factor, time_raw * 1e6, alg_raw,
                   alg_raw * c.bus_factor, alg_ours / alg_raw);
        std::fflush(stdout);
      }
    }
    if (me == 0 && ratios > 0) {
      fmt::print("{:<15}geometric mean of the ratio over the {} sizes >= 1 MiB: {:.3f}\n", "", ratios,
                 std::exp(log_ratio_sum / ratios));
    }
  }
  return 0;
}

// =============================================================================================
// bench overlap

namespace {

// The compute loop: `chunks` sgemms of 128 x 128 x 128 (about 0.06 ms each on one core),
// calling poll() whenever `poll_s` has passed since the last call (never if poll_s <= 0).
struct Compute {
  static constexpr int kDim = 128;
  std::vector<float> a = std::vector<float>(kDim * kDim, 0.5f);
  std::vector<float> b = std::vector<float>(kDim * kDim, 0.25f);
  std::vector<float> c = std::vector<float>(kDim * kDim, 0.0f);
  int chunks = 1;

  void chunk() {
    cpu::gemm(false, false, kDim, kDim, kDim, 1.0f, a.data(), kDim, b.data(), kDim, 0.0f, c.data(), kDim);
  }
  int run(double poll_s, const std::function<void()>& poll) {
    int polls = 0;
    double last = now();
    for (int i = 0; i < chunks; ++i) {
      chunk();
      if (poll_s > 0 && now() - last >= poll_s) {
        poll();
        ++polls;
        last = now();
      }
    }
    return polls;
  }
};

}  // namespace

int run_bench_overlap(const OverlapBenchOptions& o) {
  NDT_CHECK(o.bytes >= 4, "--bytes {} must be at least 4", o.bytes);
  NDT_CHECK(o.reps >= 1, "--reps {} must be positive", o.reps);
  NDT_CHECK(o.poll_ms > 0, "--poll-ms {} must be positive", o.poll_ms);
  MpiRuntime mpi;
  cpu::set_num_threads(1);
  auto world = mpi_world();
  const MPI_Comm comm = world->native();
  const int me = world->rank();
  const size_t count = o.bytes / 4;
  std::vector<float> buf(count, 0.0f);
  Compute compute;
  const double poll_s = o.poll_ms * 1e-3;

  // Each measurement: barrier, run, time on this rank; the median over reps of the max over ranks.
  auto measure = [&](const std::function<void()>& body) {
    std::vector<double> times;
    for (int r = 0; r < o.reps; ++r) {
      MPI_Barrier(comm);
      const double t0 = now();
      body();
      times.push_back(max_over_ranks(comm, now() - t0));
    }
    return median(times);
  };
  auto blocking = [&] { world->all_reduce(buf.data(), count, DType::f32, ReduceOp::sum); };
  auto nonblocking = [&] { world->iall_reduce(buf.data(), count, DType::f32, ReduceOp::sum)->wait(); };
  blocking();
  nonblocking();
  const double t_blocking = measure(blocking);
  const double t_nonblocking = measure(nonblocking);

  // Size the compute loop to the non-blocking all-reduce's time (rank 0's estimate).
  const double t0 = now();
  for (int i = 0; i < 50; ++i) compute.chunk();
  double chunk_s = (now() - t0) / 50;
  MPI_Bcast(&chunk_s, 1, MPI_DOUBLE, 0, comm);
  double target_s = o.compute_ms > 0 ? o.compute_ms * 1e-3 : t_nonblocking;
  compute.chunks = std::max(1, static_cast<int>(target_s / chunk_s));
  const double t_compute = measure([&] { compute.run(0, {}); });

  if (me == 0) {
    fmt::print("bench overlap: all_reduce of {:.1f} MiB f32 over {} ranks, one compute thread per rank\n",
               count * 4.0 / (1 << 20), world->size());
    fmt::print("  alone: blocking all_reduce {:.1f} ms, iall_reduce + wait {:.1f} ms, compute {:.1f} ms "
               "({} sgemm chunks of 128^3, {:.3f} ms each)\n", t_blocking * 1e3, t_nonblocking * 1e3, t_compute * 1e3,
               compute.chunks, chunk_s * 1e3);
    fmt::print("  hidden = (comm alone + compute alone - together) / comm alone, comm alone being the same kind of\n"
               "  call (iall_reduce for a-c, blocking for d); vs serial = together / (blocking all_reduce + compute)\n"
               "  median of {} runs, max over ranks\n\n", o.reps);
    fmt::print("  {:<58}{:>12}{:>9}{:>11}\n", "mode", "total ms", "hidden", "vs serial");
  }
  auto report = [&](const std::string& mode, double together, double comm_alone) {
    if (me != 0) return;
    fmt::print("  {:<58}{:>12.1f}{:>8.0f}%{:>11.2f}\n", mode, together * 1e3,
               100 * (comm_alone + t_compute - together) / comm_alone, together / (t_blocking + t_compute));
    std::fflush(stdout);
  };

  report("serial: blocking all_reduce, then compute", measure([&] {
           blocking();
           compute.run(0, {});
         }), t_blocking);
  report("(a) iall_reduce, compute with no MPI calls, wait", measure([&] {
           WorkHandle w = world->iall_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
           compute.run(0, {});
           w->wait();
         }), t_nonblocking);
  for (double ms : {o.poll_ms, o.poll_ms / 10}) {
    report(fmt::format("(b) iall_reduce, compute calling test() every {:g} ms, wait", ms), measure([&] {
             WorkHandle w = world->iall_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
             compute.run(ms * 1e-3, [&] { w->test(); });
             w->wait();
           }), t_nonblocking);
  }
  // The main thread makes no MPI call while the helper runs, so MPI_THREAD_SERIALIZED suffices.
  report(fmt::format("(c) iall_reduce, progress thread: test() + sleep {:g} ms", poll_s * 1e3 / 10), measure([&] {
           WorkHandle w = world->iall_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
           std::thread progress([&] {
             while (!w->test()) std::this_thread::sleep_for(std::chrono::duration<double>(poll_s / 10));
           });
           compute.run(0, {});
           progress.join();
           w->wait();
         }), t_nonblocking);
  report("(d) blocking all_reduce on a helper thread", measure([&] {
           std::thread helper(blocking);
           compute.run(0, {});
           helper.join();
         }), t_blocking);
  return 0;
}

}  // namespace ndt
