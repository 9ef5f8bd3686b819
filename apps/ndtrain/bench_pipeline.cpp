// `ndtrain bench pipeline` (under mpirun, parallel.pp = the number of ranks): trains a
// small model with each pipeline schedule on synthetic tokens and prints, per schedule,
// the step time, the bubble measured on the ranks (each rank's time outside compute
// actions, as a fraction of the step's span over all ranks, averaged over the ranks)
// next to the simulator's prediction from each rank's measured mean action costs and a
// measured boundary-tensor transfer time,
// the contexts rank 0 kept in flight and rank 0's peak of activation bytes (the ledger's,
// over the schedule's warm-up and timed steps).
#include "apps/ndtrain/commands.h"
#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/timing.h"
#include "data/shard.h"
#include "parallel/pipeline/simulator.h"
#include "train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <numeric>

namespace ndt {

int run_bench_pipeline(const PipelineBenchOptions& o) {
  NDT_CHECK(launched_by_mpi(), "bench pipeline runs under mpirun: one rank per pipeline stage");
  NDT_CHECK(o.steps > 0 && o.micro_batches > 0 && o.micro_batch_size > 0 && o.layers > 0,
            "--steps {}, --micro-batches {}, --micro-batch-size {} and --layers {} must be positive", o.steps,
            o.micro_batches, o.micro_batch_size, o.layers);
  std::unique_ptr<Communicator> world = mpi_world();
  const int pp = world->size();
  NDT_CHECK(pp >= 2, "bench pipeline needs at least 2 ranks (mpirun -np P), got {}", pp);
  // Synthetic tokens in a shard every rank reads (rank 0 writes it).
  int32_t id = static_cast<int32_t>(::getpid());
  world->broadcast(&id, 1, DType::i32, 0);
  const std::string data = fmt::format("/tmp/ndtrain-bench-pipeline-{}.bin", id);
  if (world->rank() == 0) {
    std::vector<uint16_t> tokens(200000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(philox(3, 17, i)[0] % 256);
    write_shard(data, tokens);
  }
  world->barrier();
  auto print = [&](const std::string& text) {
    if (world->rank() == 0) fmt::print("{}", text), std::fflush(stdout);
  };
  print(fmt::format("bench pipeline: {} with {} layers, T={}, pp={}, {} micro-batches of {} per step, {} steps per "
                    "schedule (after one warm-up), 1 thread per rank\n",
                    o.preset, o.layers, o.seq_len, pp, o.micro_batches, o.micro_batch_size, o.steps));
  // The communication cost of one boundary tensor: half a ping-pong between ranks 0 and
  // 1 (median of 20).
  const ModelConfig shape_of = ModelConfig::preset(o.preset);
  std::vector<float> boundary(static_cast<size_t>(o.micro_batch_size) * o.seq_len * shape_of.d_model);
  std::vector<double> trips;
  for (int i = 0; i < 21; ++i) {
    world->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (world->rank() == 0) {
      world->send(boundary.data(), boundary.size(), DType::f32, 1);
      world->recv(boundary.data(), boundary.size(), DType::f32, 1);
    } else if (world->rank() == 1) {
      world->recv(boundary.data(), boundary.size(), DType::f32, 0);
      world->send(boundary.data(), boundary.size(), DType::f32, 0);
    }
    if (i > 0) trips.push_back(seconds_since(t0));  // the first one sets the connection up
  }
  float communication = static_cast<float>(median(trips) / 2);
  world->broadcast(&communication, 1, DType::f32, 0);
  print(fmt::format("  boundary tensor [{} x {}, {}]: {:.3f} ms from send to arrival (half a ping-pong)\n",
                    o.micro_batch_size, o.seq_len, shape_of.d_model, 1e3 * communication));
  print("  schedule          | step (median) | tokens/s | bubble measured | simulated (measured costs) | "
        "contexts on rank 0 | peak activations on rank 0\n");
  for (const std::string& name : split_comma_list(o.schedules)) {
    const PipelineSchedule schedule = pipeline_schedule_from_name(name);
    const bool two_chunks =
        schedule == PipelineSchedule::interleaved_1f1b || pipeline_placement(schedule) == PipelinePlacement::v;
    const int v = two_chunks ? 2 : 1;
    const int seq_chunks = schedule == PipelineSchedule::seq1f1b ? o.seq_chunks : 1;
    RunConfig c;
    c.model = ModelConfig::preset(o.preset);
    c.model.n_layer = o.layers;
    c.model.max_seq_len = std::max(c.model.max_seq_len, o.seq_len);
    c.seq_len = o.seq_len;
    c.micro_batch_size = o.micro_batch_size;
    c.batch_size = o.micro_batch_size * o.micro_batches;
    c.steps = o.steps + 1;
    c.eval_every = 0;
    c.sample_tokens = 0;
    c.threads = 1;
    c.peak_gflops = 100;
    c.out_dir = "";
    c.train_data = data;
    c.mesh.pp = pp;
    c.pp_schedule = schedule;
    c.pp_virtual_stages = v;
    c.pp_seq_chunks = seq_chunks;
    DeviceMesh mesh(*world, c.resolve_mesh(pp));
    MemoryLedger& ledger = MemoryLedger::instance();
    const size_t activations_before = ledger.current(MemTag::activations);
    ledger.reset_peaks();
    Trainer trainer(c, mesh, nullptr);
    trainer.step();  // warm-up
    std::vector<double> steps, measured;
    std::array<double, 4> cost_sum{}, cost_count{};
    for (int s = 0; s < o.steps; ++s) {
      world->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      trainer.step();
      const double step_s = seconds_since(t0);
      const PipelineStepTimes& t = trainer.pipeline()->last_step_times();
      float span = static_cast<float>(t.wall);
      world->all_reduce(&span, 1, DType::f32, ReduceOp::max);
      float bubble = static_cast<float>(1.0 - t.busy / span);
      world->all_reduce(&bubble, 1, DType::f32, ReduceOp::avg);
      float slowest = static_cast<float>(step_s);
      world->all_reduce(&slowest, 1, DType::f32, ReduceOp::max);
      steps.push_back(slowest);
      measured.push_back(bubble);
      for (size_t k = 0; k < 4; ++k) {
        cost_sum[k] += std::accumulate(t.compute[k].begin(), t.compute[k].end(), 0.0);
        cost_count[k] += static_cast<double>(t.compute[k].size());
      }
    }
    // Each rank's mean cost of each compute action (one chunk's, of one sequence chunk;
    // the simulator takes a rank's share of a micro-batch, v chunks x k sequence chunks),
    // gathered: the stages differ.
    std::array<float, 4> mine{};
    for (size_t k = 0; k < 4; ++k) mine[k] = cost_count[k] > 0 ? static_cast<float>(v * seq_chunks * cost_sum[k] / cost_count[k]) : 0.0f;
    std::vector<float> all(static_cast<size_t>(4 * pp));
    world->all_gather(mine.data(), all.data(), 4, DType::f32);
    std::vector<PipelineCosts> costs(static_cast<size_t>(pp));
    for (int r = 0; r < pp; ++r) {
      const float* m = all.data() + 4 * r;
      PipelineCosts& c_r = costs[static_cast<size_t>(r)];
      c_r.forward = m[0];
      c_r.backward = m[1] > 0 ? m[1] : m[2] + m[3];  // zb_h1's ranks > 0 and zb_v run no fused backward
      c_r.backward_input = m[2] > 0 ? m[2] : c_r.backward / 2;
      c_r.backward_weight = m[3] > 0 ? m[3] : c_r.backward / 2;
      c_r.communication = communication;
    }
    const PipelineShape shape = pipeline_shape(schedule, pp, v, o.micro_batches, seq_chunks);
    const double simulated = simulate_pipeline(pipeline_actions_of_all_ranks(schedule, shape), shape, costs).mean_bubble;
    const double step_s = median(steps);
    const double peak_mib = static_cast<double>(ledger.peak(MemTag::activations) - activations_before) / (1 << 20);
    const std::string label = seq_chunks > 1 ? fmt::format("{} k={}", name, seq_chunks) : name;
    print(fmt::format("  {:<17} | {:>11.3f} s | {:>8.0f} | {:>14.1f}% | {:>25.1f}% | {:>18} | {:>22.2f} MiB\n", label,
                      step_s, c.batch_size * c.seq_len / step_s, 100.0 * median(measured), 100.0 * simulated,
                      trainer.pipeline()->peak_live_contexts(), peak_mib));
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove(data);
  return 0;
}

}  // namespace ndt
