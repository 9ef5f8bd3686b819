#include "parallel/pipeline/runner.h"

#include "core/error.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "model/sequence_chunk_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <string>

namespace ndt {

namespace {

// In PipelineActionKind's order.
constexpr std::array<std::string_view, 8> kActionKindNames = {
    "forward",         "backward",        "backward_input", "backward_weight",
    "send_activation", "recv_activation", "send_gradient",  "recv_gradient"};

}  // namespace

std::string_view pipeline_action_kind_name(PipelineActionKind kind) {
  return kActionKindNames.at(static_cast<size_t>(kind));
}

PipelineActionKind pipeline_action_kind_from_name(std::string_view name) {
  for (size_t k = 0; k < kActionKindNames.size(); ++k) {
    if (kActionKindNames[k] == name) return static_cast<PipelineActionKind>(k);
  }
  std::string choices;
  for (std::string_view n : kActionKindNames) choices += fmt::format("{}{}", choices.empty() ? "" : ", ", n);
  fail("unknown pipeline action kind \"{}\" (one of {})", name, choices);
}

PipelineRunner::PipelineRunner(Transformer& model, Communicator& pp, PipelineSchedule schedule,
                               const PipelineShape& shape, PipelineStages stages, ModelHooks* hooks)
    : model_(model), pp_(pp), schedule_(schedule), shape_(shape), stages_(std::move(stages)), hooks_(hooks) {
  NDT_CHECK(stages_.chunks() == shape_.chunks(), "pipeline: {} chunks of units for pp x v = {}", stages_.chunks(),
            shape_.chunks());
  NDT_CHECK(pp_.size() == shape_.pp, "pipeline: the pp communicator has {} ranks, the schedule {}", pp_.size(),
            shape_.pp);
  check_pipeline_shape(schedule_, shape_);
  actions_ = pipeline_actions(schedule_, shape_, pp_.rank());
}

void PipelineRunner::poll() {
  if (hooks_) hooks_->poll();
  for (WorkHandle& send : sends_) send->test();
}

MicroBatchContext& PipelineRunner::context(const PipelineAction& a) {
  std::unique_ptr<MicroBatchContext>& slot = live_[static_cast<size_t>(unit_of(a))];
  if (!slot) {
    if (free_.empty()) free_.push_back(std::make_unique<MicroBatchContext>());
    slot = std::move(free_.back());
    free_.pop_back();
    slot->sequence.index = a.seq_chunk;
    slot->sequence.count = shape_.seq_chunks;
    (*prepare_)(a.micro_batch, *slot, /*forward_only=*/false);
    if (shape_.seq_chunks > 1) link_sequence_chunk(*slot, a.micro_batch);
    peak_live_ = std::max(peak_live_, ++live_count_);
  }
  return *slot;
}

void PipelineRunner::link_sequence_chunk(MicroBatchContext& ctx, int mb) {
  const int k = shape_.seq_chunks, L = model_.config().n_layer;
  ctx.sequence.earlier.clear();
  for (int j = 0; j < ctx.sequence.index; ++j) {
    const MicroBatchContext* earlier = live_[static_cast<size_t>(mb * k + j)].get();
    NDT_CHECK(earlier, "seq1f1b: micro-batch {}'s sequence chunk {} runs while chunk {} is not in flight", mb,
              ctx.sequence.index, j);
    ctx.sequence.earlier.push_back(earlier);
  }
  // The sums of this rank's blocks, one after the other, allocated with the first chunk.
  ActivationLayout layout = model_.tensor_parallel().layout();
  layout.seq_chunks = k;
  const int64_t per_block = sequence_chunk_sum_floats(model_.config(), layout, ctx.B, ctx.T, k);
  const std::vector<char>& units = model_.local_units();
  auto here = [&](int layer) { return units.empty() || units[static_cast<size_t>(layer) + 1] != 0; };
  if (!key_value_sums_.defined()) {
    int64_t blocks = 0;
    for (int l = 0; l < L; ++l) blocks += here(l) ? 1 : 0;
    key_value_sums_ = Tensor::empty({blocks * per_block}, DType::f32, MemTag::activations);
  }
  ctx.sequence.key_value_sums.assign(static_cast<size_t>(L), nullptr);
  float* next = key_value_sums_.data<float>();
  for (int l = 0; l < L; ++l) {
    if (here(l)) ctx.sequence.key_value_sums[static_cast<size_t>(l)] = next, next += per_block;
  }
}

void PipelineRunner::release(int unit) {
  std::unique_ptr<MicroBatchContext>& slot = live_[static_cast<size_t>(unit)];
  if (model_.holds_head()) losses_.loss_sum += slot->loss_sum, losses_.z_loss_sum += slot->z_loss_sum;
  free_.push_back(std::move(slot));
  --live_count_;
}

int64_t PipelineRunner::boundary_floats(const MicroBatchContext& ctx) const {
  return model_.tensor_parallel().layout().local_rows(ctx.rows()) * model_.config().d_model;
}

float* PipelineRunner::boundary(MicroBatchContext& ctx, int chunk, bool input) {
  // Unit u reads stream slot u - 1 and writes slot u.
  return ctx.stream[static_cast<size_t>(input ? first_unit(chunk) - 1 : end_unit(chunk) - 1)];
}

void PipelineRunner::forward(int chunk, MicroBatchContext& ctx) {
  for (int u = first_unit(chunk); u < end_unit(chunk); ++u) {
    if (hooks_) hooks_->before_forward(u);
    model_.unit(u).forward(ctx);
    if (hooks_) hooks_->after_forward(u);
    poll();  // forward has no polls of its own
  }
}

void PipelineRunner::run(const PipelineAction& a) {
  const int c = a.chunk;
  switch (a.kind) {
    case PipelineActionKind::forward: forward(c, context(a)); return;
    case PipelineActionKind::backward:
    case PipelineActionKind::backward_input: {
      MicroBatchContext& ctx = context(a);
      const bool split = a.kind == PipelineActionKind::backward_input;
      for (int u = end_unit(c) - 1; u >= first_unit(c); --u) {
        if (hooks_) hooks_->before_backward(u);
        if (split) {
          model_.unit(u).backward_input(ctx, this);
        } else {
          model_.unit(u).backward(ctx, this);
          if (hooks_) hooks_->after_backward(u);
        }
      }
      return;
    }
    case PipelineActionKind::backward_weight: {
      MicroBatchContext& ctx = context(a);
      for (int u = end_unit(c) - 1; u >= first_unit(c); --u) {
        model_.unit(u).backward_weight(ctx, this);
        if (hooks_) hooks_->after_backward(u);
      }
      return;
    }
    case PipelineActionKind::send_activation: {
      MicroBatchContext& ctx = context(a);
      sends_.push_back(pp_.isend(boundary(ctx, c, /*input=*/false), static_cast<size_t>(boundary_floats(ctx)),
                                 DType::f32, a.peer, pipeline_message_id(a, shape_)));
      return;
    }
    case PipelineActionKind::recv_activation: {
      MicroBatchContext& ctx = context(a);
      pp_.irecv(boundary(ctx, c, /*input=*/true), static_cast<size_t>(boundary_floats(ctx)), DType::f32, a.peer,
                pipeline_message_id(a, shape_))
          ->wait();
      return;
    }
    case PipelineActionKind::send_gradient: {
      // The chunk's backward left dL/d(its input) in the workspace, which the next
      // backward reuses: send a copy.
      MicroBatchContext& ctx = context(a);
      const int64_t n = boundary_floats(ctx);
      Tensor copy = Tensor::empty({n}, DType::f32, MemTag::comm);
      kernels::copy(copy.data<float>(), model_.workspace_dstream(), n);
      sends_.push_back(pp_.isend(copy.data<float>(), static_cast<size_t>(n), DType::f32, a.peer,
                                 pipeline_message_id(a, shape_)));
      send_buffers_.push_back(std::move(copy));
      return;
    }
    case PipelineActionKind::recv_gradient: {
      MicroBatchContext& ctx = context(a);
      model_.fit_workspace(ctx);
      pp_.irecv(model_.workspace_dstream(), static_cast<size_t>(boundary_floats(ctx)), DType::f32, a.peer,
                pipeline_message_id(a, shape_))
          ->wait();
      return;
    }
  }
}

PipelineLosses PipelineRunner::sum_over_pp(PipelineLosses local) {
  float sums[2] = {static_cast<float>(local.loss_sum), static_cast<float>(local.z_loss_sum)};
  pp_.all_reduce(sums, model_.z_loss() > 0 ? 2 : 1, DType::f32, ReduceOp::sum);
  return {sums[0], sums[1]};
}

PipelineLosses PipelineRunner::train(const Prepare& prepare) {
  prepare_ = &prepare;
  live_.clear();
  live_.resize(static_cast<size_t>(shape_.m) * shape_.seq_chunks);
  live_count_ = 0;
  losses_ = {};
  // A unit's context goes back to the pool after the last action that uses it.
  std::vector<size_t> last_use(live_.size(), 0);
  for (size_t i = 0; i < actions_.size(); ++i) last_use[static_cast<size_t>(unit_of(actions_[i]))] = i;
  times_ = {};
  const auto start = std::chrono::steady_clock::now();
  times_.actions.reserve(actions_.size());
  for (size_t i = 0; i < actions_.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run(actions_[i]);
    const auto t1 = std::chrono::steady_clock::now();
    times_.actions.push_back({std::chrono::duration<double>(t0 - start).count(),
                              std::chrono::duration<double>(t1 - start).count(), actions_[i]});
    if (!is_communication(actions_[i].kind)) {
      const double seconds = std::chrono::duration<double>(t1 - t0).count();
      times_.busy += seconds;
      times_.compute[static_cast<size_t>(actions_[i].kind)].push_back(seconds);
    }
    const int unit = unit_of(actions_[i]);
    if (i == last_use[static_cast<size_t>(unit)]) release(unit);
  }
  for (WorkHandle& send : sends_) send->wait();
  // Nothing needs to stay for a backward: a sharded layout frees what it gathered.
  if (hooks_) hooks_->after_forward_only();
  times_.wall = seconds_since(start);
  sends_.clear();
  send_buffers_.clear();
  return sum_over_pp(losses_);
}

std::vector<std::vector<TimedPipelineAction>> PipelineRunner::gather_last_step_timeline() {
  // An action travels as 7 f32 words: kind, micro-batch, chunk, peer, sequence chunk
  // (small integers, exact in f32), start and end (seconds: f32 keeps well under a microsecond within a
  // step of seconds, plenty for a picture). Ranks run lists of different lengths: each
  // pads to the longest.
  constexpr size_t kWords = 7;
  const int32_t mine = static_cast<int32_t>(times_.actions.size());
  std::vector<int32_t> counts(static_cast<size_t>(pp_.size()));
  pp_.all_gather(&mine, counts.data(), 1, DType::i32);
  const size_t longest = static_cast<size_t>(*std::max_element(counts.begin(), counts.end()));
  std::vector<float> send(longest * kWords, 0.0f), all(send.size() * counts.size());
  for (size_t i = 0; i < times_.actions.size(); ++i) {
    const TimedPipelineAction& t = times_.actions[i];
    const float words[kWords] = {static_cast<float>(t.action.kind), static_cast<float>(t.action.micro_batch),
                                 static_cast<float>(t.action.chunk), static_cast<float>(t.action.peer),
                                 static_cast<float>(t.action.seq_chunk), static_cast<float>(t.start),
                                 static_cast<float>(t.end)};
    std::copy(words, words + kWords, send.begin() + static_cast<std::ptrdiff_t>(i * kWords));
  }
  pp_.all_gather(send.data(), all.data(), send.size(), DType::f32);
  std::vector<std::vector<TimedPipelineAction>> timeline(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    for (size_t i = 0; i < static_cast<size_t>(counts[r]); ++i) {
      const float* w = all.data() + (r * longest + i) * kWords;
      timeline[r].push_back({w[5], w[6],
                             PipelineAction{static_cast<PipelineActionKind>(w[0]), static_cast<int>(w[1]),
                                            static_cast<int>(w[2]), static_cast<int>(w[3]), static_cast<int>(w[4])}});
    }
  }
  return timeline;
}

PipelineLosses PipelineRunner::evaluate(int micro_batches, const Prepare& prepare) {
  const int rank = pp_.rank();
  PipelineLosses losses;
  MicroBatchContext ctx;
  for (int mb = 0; mb < micro_batches; ++mb) {
    prepare(mb, ctx, /*forward_only=*/true);
    for (int c : shape_.chunks_of(rank)) {
      // Chunk c's input comes from chunk c - 1's rank, its output goes to chunk c + 1's
      // (the messages of a schedule's forward, with their ids), where that is another rank.
      const PipelineAction in{PipelineActionKind::recv_activation, mb, c, c > 0 ? shape_.rank_of(c - 1) : rank};
      const PipelineAction out{PipelineActionKind::send_activation, mb, c,
                               c + 1 < shape_.chunks() ? shape_.rank_of(c + 1) : rank};
      if (in.peer != rank) {
        pp_.irecv(boundary(ctx, c, true), static_cast<size_t>(boundary_floats(ctx)), DType::f32, in.peer,
                  pipeline_message_id(in, shape_))
            ->wait();
      }
      forward(c, ctx);
      if (out.peer != rank) {
        pp_.isend(boundary(ctx, c, false), static_cast<size_t>(boundary_floats(ctx)), DType::f32, out.peer,
                  pipeline_message_id(out, shape_))
            ->wait();
      }
    }
    if (model_.holds_head()) losses.loss_sum += ctx.loss_sum, losses.z_loss_sum += ctx.z_loss_sum;
  }
  if (hooks_) hooks_->after_forward_only();
  return sum_over_pp(losses);
}

}  // namespace ndt
