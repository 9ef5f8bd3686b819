#include "parallel/pipeline/schedule.h"

#include "core/error.h"
#include "parallel/pipeline/seq1f1b.h"
#include "parallel/pipeline/v_schedules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <deque>

namespace ndt {

namespace {

constexpr PipelineSchedule kSchedules[] = {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                           PipelineSchedule::interleaved_1f1b, PipelineSchedule::zb_h1,
                                           PipelineSchedule::zb_v,  PipelineSchedule::dualpipev,
                                           PipelineSchedule::seq1f1b};

using Kind = PipelineActionKind;

PipelineAction compute(Kind kind, int micro_batch, int chunk) { return {kind, micro_batch, chunk, -1}; }

// gpipe: every forward, then every backward from the last micro-batch to the first.
std::vector<PipelineAction> gpipe_compute(const PipelineShape& shape, int rank) {
  std::vector<PipelineAction> out;
  for (int mb = 0; mb < shape.m; ++mb) out.push_back(compute(Kind::forward, mb, rank));
  for (int mb = shape.m - 1; mb >= 0; --mb) out.push_back(compute(Kind::backward, mb, rank));
  return out;
}

// 1f1b, and zb_h1 with deferred_weights = rank: pp - rank - 1 warm-up forwards, then a
// forward (while any are left) and a backward in turn. With deferred weights each
// backward is split and its weight pass waits until more than deferred_weights are
// pending; the last ones run at the end.
std::vector<PipelineAction> one_forward_one_backward_compute(const PipelineShape& shape, int rank,
                                                             int deferred_weights) {
  std::vector<PipelineAction> out;
  const int warmup = std::min(shape.pp - rank - 1, shape.m);
  int next_forward = 0;
  while (next_forward < warmup) out.push_back(compute(Kind::forward, next_forward++, rank));
  std::deque<int> pending_weights;
  for (int mb = 0; mb < shape.m; ++mb) {
    if (next_forward < shape.m) out.push_back(compute(Kind::forward, next_forward++, rank));
    if (deferred_weights == 0) {
      out.push_back(compute(Kind::backward, mb, rank));
      continue;
    }
    out.push_back(compute(Kind::backward_input, mb, rank));
    pending_weights.push_back(mb);
    if (static_cast<int>(pending_weights.size()) > deferred_weights) {
      out.push_back(compute(Kind::backward_weight, pending_weights.front(), rank));
      pending_weights.pop_front();
    }
  }
  for (int mb : pending_weights) out.push_back(compute(Kind::backward_weight, mb, rank));
  return out;
}

// Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving): the
// rank's v x m chunk-passes in the order of k = 0, 1, ...: micro-batches in groups of
// pp, each group through the rank's chunks in turn (backward: the chunks reversed).
std::vector<PipelineAction> interleaved_compute(const PipelineShape& shape, int rank) {
  const int total = shape.m * shape.v, group = shape.pp * shape.v;
  auto micro_batch = [&](int k) { return (k / group) * shape.pp + k % shape.pp; };
  auto chunk = [&](int k, bool forward) {
    const int local = (k % group) / shape.pp;
    return (forward ? local : shape.v - 1 - local) * shape.pp + rank;
  };
  auto forward = [&](int k) { return compute(Kind::forward, micro_batch(k), chunk(k, true)); };
  auto backward = [&](int k) { return compute(Kind::backward, micro_batch(k), chunk(k, false)); };

  const int warmup = std::min(2 * (shape.pp - rank - 1) + (shape.v - 1) * shape.pp, total);
  std::vector<PipelineAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

bool computes_input_gradient(Kind kind) { return kind == Kind::backward || kind == Kind::backward_input; }

// Adds the point-to-point actions around the compute order: each receive immediately
// before the action that needs it (or, where paired[i], before action i, with action
// i's own: the pair starts when both inputs are there), each send immediately after
// the one that produced it, and none between chunks of one rank.
std::vector<PipelineAction> with_communication(const std::vector<PipelineAction>& compute_order,
                                               const PipelineShape& shape, int rank,
                                               const std::vector<char>& paired = {}) {
  auto remote = [&](int chunk) { return chunk >= 0 && chunk < shape.chunks() && shape.rank_of(chunk) != rank; };
  std::vector<PipelineAction> out;
  auto message = [&](Kind kind, const PipelineAction& a, int neighbour) {
    return PipelineAction{kind, a.micro_batch, a.chunk, shape.rank_of(neighbour), a.seq_chunk};
  };
  auto receives = [&](const PipelineAction& a) {
    if (a.kind == Kind::forward && remote(a.chunk - 1)) out.push_back(message(Kind::recv_activation, a, a.chunk - 1));
    if (computes_input_gradient(a.kind) && remote(a.chunk + 1)) {
      out.push_back(message(Kind::recv_gradient, a, a.chunk + 1));
    }
  };
  auto is_paired = [&](size_t i) { return i < paired.size() && paired[i]; };
  for (size_t i = 0; i < compute_order.size(); ++i) {
    const PipelineAction& a = compute_order[i];
    if (i == 0 || !is_paired(i - 1)) receives(a);
    if (is_paired(i)) receives(compute_order.at(i + 1));
    out.push_back(a);
    if (a.kind == Kind::forward && remote(a.chunk + 1)) out.push_back(message(Kind::send_activation, a, a.chunk + 1));
    if (computes_input_gradient(a.kind) && remote(a.chunk - 1)) {
      out.push_back(message(Kind::send_gradient, a, a.chunk - 1));
    }
  }
  return out;
}

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::forward: return "Forward";
    case Kind::backward: return "Backward";
    case Kind::backward_input: return "BackwardInput";
    case Kind::backward_weight: return "BackwardWeight";
    case Kind::send_activation: return "SendActivation";
    case Kind::recv_activation: return "RecvActivation";
    case Kind::send_gradient: return "SendGradient";
    case Kind::recv_gradient: return "RecvGradient";
  }
  return "";
}

bool is_send(Kind kind) { return kind == Kind::send_activation || kind == Kind::send_gradient; }
bool is_receive(Kind kind) { return kind == Kind::recv_activation || kind == Kind::recv_gradient; }

// The rank a communication action should name as its peer, or -1 where there is no
// neighbour chunk or it lies on the same rank (then nothing may be sent).
int expected_peer(const PipelineAction& a, const PipelineShape& shape, int rank) {
  const bool towards_next = a.kind == Kind::send_activation || a.kind == Kind::recv_gradient;
  const int neighbour = towards_next ? a.chunk + 1 : a.chunk - 1;
  if (neighbour < 0 || neighbour >= shape.chunks() || shape.rank_of(neighbour) == rank) return -1;
  return shape.rank_of(neighbour);
}

// One list per rank, every action on a chunk of its rank and a micro-batch in range.
void check_ranks_chunks_and_micro_batches(const std::vector<std::vector<PipelineAction>>& ranks,
                                          const PipelineShape& shape) {
  NDT_CHECK(static_cast<int>(ranks.size()) == shape.pp, "{} action lists for parallel.pp = {} ranks", ranks.size(),
            shape.pp);
  for (int r = 0; r < shape.pp; ++r) {
    for (size_t i = 0; i < ranks[r].size(); ++i) {
      const PipelineAction& a = ranks[r][i];
      NDT_CHECK(a.micro_batch >= 0 && a.micro_batch < shape.m,
                "rank {} action {}: {} has a micro-batch outside [0, {})", r, i, describe(a), shape.m);
      NDT_CHECK(a.seq_chunk >= 0 && a.seq_chunk < shape.seq_chunks,
                "rank {} action {}: {} has a sequence chunk outside [0, {})", r, i, describe(a), shape.seq_chunks);
      NDT_CHECK(a.chunk >= 0 && a.chunk < shape.chunks() && shape.rank_of(a.chunk) == r,
                "rank {} action {}: {} names a chunk rank {} does not hold (chunk {} lives on rank {})", r, i,
                describe(a), r, a.chunk, shape.rank_of(a.chunk));
    }
  }
}

// The input gradient a chunk's backward hands to the chunk before it on the same rank
// stays in the model's workspace (nothing is sent), where the next backward or
// gradient receive would overwrite it: that next one must be the handed-to chunk's
// backward of the same micro-batch. Forwards and weight passes leave it alone.
void check_local_gradient_handoffs(const std::vector<std::vector<PipelineAction>>& ranks, const PipelineShape& shape) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const PipelineAction* waiting = nullptr;  // the backward whose input gradient is in the workspace
    for (size_t i = 0; i < ranks[r].size(); ++i) {
      const PipelineAction& a = ranks[r][i];
      const bool backward = computes_input_gradient(a.kind);
      if (!backward && a.kind != Kind::recv_gradient) continue;
      NDT_CHECK(waiting == nullptr || (backward && a.micro_batch == waiting->micro_batch &&
                                       a.seq_chunk == waiting->seq_chunk && a.chunk == waiting->chunk - 1),
                "rank {} action {}: {} runs while the input gradient of {} waits in the workspace for chunk {} of "
                "the same rank (a micro-batch's backward passes through a rank's neighbouring chunks need no "
                "other backward between them)",
                r, i, describe(a), describe(*waiting), waiting->chunk - 1);
      const bool hands_on = backward && a.chunk > 0 && shape.rank_of(a.chunk - 1) == r;
      waiting = hands_on ? &a : nullptr;
    }
  }
}

// Where a micro-batch stands on one chunk while the lists are replayed.
struct ChunkPasses {
  bool forward = false;
  bool input_gradient = false;  // Backward or BackwardInput
  bool split = false;           // by BackwardInput: a BackwardWeight must follow
  bool weight_gradient = false;
  bool activation_received = false;  // from the rank of the chunk before
  bool gradient_received = false;    // from the rank of the chunk after
};

// Seq1F1B's backward order on one chunk: a micro-batch's sequence chunks last first (the
// later ones add to the earlier ones' key/value gradients), and no other micro-batch's
// backward between them (the runner keeps one micro-batch's sums at a time).
// later_done: whether the backward of the next sequence chunk has run (true for the last).
void check_sequence_backward(const PipelineAction& a, bool later_done, std::vector<int>& open_backward,
                             const std::string& where) {
  const int seq = a.seq_chunk;
  int& open = open_backward[static_cast<size_t>(a.chunk)];
  NDT_CHECK(later_done,
            "{} runs before the backward of sequence chunk {} (a micro-batch's sequence chunks go backward in "
            "descending order)",
            where, seq + 1);
  NDT_CHECK(open == -1 || open == a.micro_batch,
            "{} runs while micro-batch {}'s sequence chunks are part-way through their backward of chunk {}", where,
            open, a.chunk);
  open = seq == 0 ? -1 : a.micro_batch;
}

}  // namespace

std::string_view pipeline_schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::interleaved_1f1b: return "interleaved_1f1b";
    case PipelineSchedule::zb_h1: return "zb_h1";
    case PipelineSchedule::zb_v: return "zb_v";
    case PipelineSchedule::dualpipev: return "dualpipev";
    case PipelineSchedule::seq1f1b: return "seq1f1b";
  }
  return "";
}

PipelinePlacement pipeline_placement(PipelineSchedule schedule) {
  const bool v = schedule == PipelineSchedule::zb_v || schedule == PipelineSchedule::dualpipev;
  return v ? PipelinePlacement::v : PipelinePlacement::loop;
}

std::vector<int> PipelineShape::chunks_of(int rank) const {
  std::vector<int> out;
  for (int c = 0; c < chunks(); ++c) {
    if (rank_of(c) == rank) out.push_back(c);
  }
  return out;
}

PipelineShape pipeline_shape(PipelineSchedule schedule, int pp, int v, int m, int seq_chunks) {
  return {pp, v, m, seq_chunks, pipeline_placement(schedule)};
}

std::vector<std::string> pipeline_schedule_names() {
  std::vector<std::string> names;
  for (PipelineSchedule s : kSchedules) names.emplace_back(pipeline_schedule_name(s));
  return names;
}

PipelineSchedule pipeline_schedule_from_name(std::string_view name) {
  for (PipelineSchedule s : kSchedules) {
    if (pipeline_schedule_name(s) == name) return s;
  }
  fail("parallel.pp_schedule = \"{}\" is not a known schedule ({})", name, fmt::join(pipeline_schedule_names(), ", "));
}

void check_pipeline_shape(PipelineSchedule schedule, const PipelineShape& shape) {
  NDT_CHECK(shape.pp >= 1, "parallel.pp = {} must be at least 1", shape.pp);
  NDT_CHECK(shape.v >= 1, "parallel.pp_virtual_stages = {} must be at least 1", shape.v);
  NDT_CHECK(shape.m >= 1, "the number of micro-batches per step ({}) must be at least 1", shape.m);
  NDT_CHECK(shape.seq_chunks >= 1, "parallel.pp_seq_chunks = {} must be at least 1", shape.seq_chunks);
  const int64_t pairs = int64_t{shape.pp} * shape.v * shape.m * shape.seq_chunks;
  NDT_CHECK(pairs <= kMaxPipelinePairs,
            "parallel.pp = {} x parallel.pp_virtual_stages = {} x {} micro-batches per step = {} (micro-batch, chunk) "
            "pairs in one step's schedule: more than {} (use larger micro-batches)",
            shape.pp, shape.v, shape.m, pairs, kMaxPipelinePairs);
  const std::string_view name = pipeline_schedule_name(schedule);
  if (schedule == PipelineSchedule::seq1f1b) {
    NDT_CHECK(shape.seq_chunks >= 2,
              "parallel.pp_schedule = \"seq1f1b\" needs parallel.pp_seq_chunks >= 2 sequence chunks, got {}",
              shape.seq_chunks);
  } else {
    NDT_CHECK(shape.seq_chunks == 1,
              "parallel.pp_seq_chunks = {} cuts micro-batches into sequence chunks, which only parallel.pp_schedule = "
              "\"seq1f1b\" runs (parallel.pp_schedule = \"{}\")",
              shape.seq_chunks, name);
  }
  NDT_CHECK(shape.placement == pipeline_placement(schedule),
            "parallel.pp_schedule = \"{}\" runs with {} placement of the chunks, not the shape's", name,
            pipeline_placement(schedule) == PipelinePlacement::v ? "the V" : "the loop");
  if (pipeline_placement(schedule) == PipelinePlacement::v) {
    NDT_CHECK(shape.v == 2,
              "parallel.pp_schedule = \"{}\" places two chunks per rank in a V: it needs parallel.pp_virtual_stages = "
              "2, got {}",
              name, shape.v);
    return;
  }
  if (schedule != PipelineSchedule::interleaved_1f1b) {
    NDT_CHECK(shape.v == 1,
              "parallel.pp_schedule = \"{}\" runs one stage per rank, but parallel.pp_virtual_stages = {}: use "
              "\"interleaved_1f1b\", \"zb_v\" or \"dualpipev\" for virtual stages",
              name, shape.v);
    return;
  }
  NDT_CHECK(shape.v >= 2,
            "parallel.pp_schedule = \"{}\" needs parallel.pp_virtual_stages >= 2, got {} (with one stage per rank use "
            "\"1f1b\")",
            name, shape.v);
  NDT_CHECK(shape.m % shape.pp == 0,
            "parallel.pp_schedule = \"{}\" needs the number of micro-batches ({}) to be a multiple of parallel.pp "
            "({})",
            name, shape.m, shape.pp);
}

bool is_communication(PipelineActionKind kind) { return is_send(kind) || is_receive(kind); }

std::string describe(const PipelineAction& a) {
  const std::string unit =
      a.seq_chunk == 0 ? fmt::format("mb {}", a.micro_batch) : fmt::format("mb {} seq {}", a.micro_batch, a.seq_chunk);
  if (!is_communication(a.kind)) return fmt::format("{}({}, chunk {})", kind_name(a.kind), unit, a.chunk);
  return fmt::format("{}({}, chunk {}, {} rank {})", kind_name(a.kind), unit, a.chunk, is_send(a.kind) ? "to" : "from",
                     a.peer);
}

int pipeline_message_id(const PipelineAction& a, const PipelineShape& shape) {
  NDT_CHECK(is_communication(a.kind), "{} is not a communication action", describe(a));
  const bool activation = a.kind == Kind::send_activation || a.kind == Kind::recv_activation;
  int receiving_chunk = a.chunk;
  if (a.kind == Kind::send_activation) receiving_chunk = a.chunk + 1;
  if (a.kind == Kind::send_gradient) receiving_chunk = a.chunk - 1;
  NDT_CHECK(receiving_chunk >= 0 && receiving_chunk < shape.chunks(), "{} goes past the first or last chunk",
            describe(a));
  const int unit = a.micro_batch * shape.seq_chunks + a.seq_chunk;
  return (unit * shape.chunks() + receiving_chunk) * 2 + (activation ? 0 : 1);
}

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape, int rank) {
  check_pipeline_shape(schedule, shape);
  NDT_CHECK(rank >= 0 && rank < shape.pp, "pipeline rank {} is outside parallel.pp = {}", rank, shape.pp);
  switch (schedule) {
    case PipelineSchedule::gpipe: return with_communication(gpipe_compute(shape, rank), shape, rank);
    case PipelineSchedule::one_f_one_b:
      return with_communication(one_forward_one_backward_compute(shape, rank, 0), shape, rank);
    case PipelineSchedule::interleaved_1f1b: return with_communication(interleaved_compute(shape, rank), shape, rank);
    case PipelineSchedule::zb_h1:
      return with_communication(one_forward_one_backward_compute(shape, rank, rank), shape, rank);
    case PipelineSchedule::zb_v: return with_communication(zb_v_compute(shape, rank).actions, shape, rank);
    case PipelineSchedule::dualpipev: {
      const VComputeOrder order = dualpipev_compute(shape, rank);
      return with_communication(order.actions, shape, rank, order.paired);
    }
    case PipelineSchedule::seq1f1b: return with_communication(seq1f1b_compute(shape, rank), shape, rank);
  }
  fail("unknown pipeline schedule {}", static_cast<int>(schedule));
}

std::vector<std::vector<PipelineAction>> pipeline_actions_of_all_ranks(PipelineSchedule schedule,
                                                                       const PipelineShape& shape) {
  check_pipeline_shape(schedule, shape);
  std::vector<std::vector<PipelineAction>> ranks;
  for (int r = 0; r < shape.pp; ++r) ranks.push_back(pipeline_actions(schedule, shape, r));
  return ranks;
}

int peak_live_contexts(const std::vector<PipelineAction>& actions) {
  // (micro-batch, sequence chunk) -> (first, last) action
  std::map<std::pair<int, int>, std::pair<size_t, size_t>> span;
  for (size_t i = 0; i < actions.size(); ++i) {
    const auto [it, fresh] = span.try_emplace(std::pair{actions[i].micro_batch, actions[i].seq_chunk}, i, i);
    it->second.second = i;
  }
  std::vector<int> change(actions.size() + 1, 0);  // +1 where a context is taken, -1 after its last use
  for (const auto& [mb, first_last] : span) ++change[first_last.first], --change[first_last.second + 1];
  int live = 0, peak = 0;
  for (int c : change) peak = std::max(peak, live += c);
  return peak;
}

void replay_pipeline_actions(const std::vector<std::vector<PipelineAction>>& ranks, const PipelineShape& shape,
                             const std::function<void(int rank, size_t index)>& step) {
  check_ranks_chunks_and_micro_batches(ranks, shape);
  const size_t messages = static_cast<size_t>(shape.m) * shape.seq_chunks * shape.chunks() * 2;
  std::vector<char> sent(messages, 0), received(messages, 0);
  std::vector<size_t> next(ranks.size(), 0);
  for (;;) {
    bool progressed = false, finished = true;
    for (int r = 0; r < shape.pp; ++r) {
      for (; next[r] < ranks[r].size(); ++next[r]) {
        const PipelineAction& a = ranks[r][next[r]];
        if (is_communication(a.kind)) {
          const int id = pipeline_message_id(a, shape);
          if (is_receive(a.kind)) {
            NDT_CHECK(!received[id], "rank {} action {}: {} receives a tensor that was already received", r, next[r],
                      describe(a));
            if (!sent[id]) break;  // blocks until its send has run
            received[id] = 1;
          } else {
            NDT_CHECK(!sent[id], "rank {} action {}: {} sends a tensor that was already sent", r, next[r],
                      describe(a));
            sent[id] = 1;
          }
        }
        step(r, next[r]);
        progressed = true;
      }
      finished = finished && next[r] == ranks[r].size();
    }
    if (finished) break;
    if (!progressed) {
      std::vector<std::string> waits;
      for (int r = 0; r < shape.pp; ++r) {
        if (next[r] == ranks[r].size()) {
          waits.push_back(fmt::format("rank {} has finished", r));
        } else {
          waits.push_back(fmt::format("rank {} waits at action {} on {}", r, next[r], describe(ranks[r][next[r]])));
        }
      }
      fail("pipeline deadlock: {}", fmt::join(waits, "; "));
    }
  }
  for (int r = 0; r < shape.pp; ++r) {
    for (size_t i = 0; i < ranks[r].size(); ++i) {
      const PipelineAction& a = ranks[r][i];
      NDT_CHECK(!is_send(a.kind) || received[pipeline_message_id(a, shape)],
                "rank {} action {}: {} has no matching receive on rank {}", r, i, describe(a), a.peer);
    }
  }
}

void check_pipeline_actions(const std::vector<std::vector<PipelineAction>>& ranks, const PipelineShape& shape) {
  check_ranks_chunks_and_micro_batches(ranks, shape);
  // Peers before the replay, whose errors name the peers.
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (size_t i = 0; i < ranks[r].size(); ++i) {
      const PipelineAction& a = ranks[r][i];
      if (!is_communication(a.kind)) {
        NDT_CHECK(a.peer == -1, "rank {} action {}: {} is compute but names peer rank {}", r, i, describe(a), a.peer);
        continue;
      }
      const int peer = expected_peer(a, shape, r);
      NDT_CHECK(peer >= 0, "rank {} action {}: {} has no neighbour chunk on another rank to talk to", r, i,
                describe(a));
      NDT_CHECK(a.peer == peer, "rank {} action {}: {} should name rank {}", r, i, describe(a), peer);
    }
  }
  check_local_gradient_handoffs(ranks, shape);
  const int chunks = shape.chunks(), k = shape.seq_chunks;
  std::vector<ChunkPasses> passes(static_cast<size_t>(shape.m) * k * chunks);
  auto at = [&](int mb, int seq, int chunk) -> ChunkPasses& {
    return passes[(static_cast<size_t>(mb) * k + seq) * chunks + chunk];
  };
  // Per chunk, the micro-batch whose sequence chunks are part-way through their backward (-1: none).
  std::vector<int> open_backward(static_cast<size_t>(chunks), -1);
  replay_pipeline_actions(ranks, shape, [&](int r, size_t i) {
    const PipelineAction& a = ranks[r][i];
    const int mb = a.micro_batch, seq = a.seq_chunk;
    ChunkPasses& p = at(mb, seq, a.chunk);
    auto where = [&] { return fmt::format("rank {} action {}: {}", r, i, describe(a)); };
    switch (a.kind) {
      case Kind::forward:
        NDT_CHECK(!p.forward, "{} runs a second time", where());
        NDT_CHECK(a.chunk == 0 || at(mb, seq, a.chunk - 1).forward,
                  "{} runs before the forward of chunk {} (forward goes in ascending chunk order)", where(),
                  a.chunk - 1);
        NDT_CHECK(seq == 0 || at(mb, seq - 1, a.chunk).forward,
                  "{} runs before the forward of sequence chunk {} (a micro-batch's sequence chunks go forward in "
                  "ascending order)",
                  where(), seq - 1);
        NDT_CHECK(a.chunk == 0 || shape.rank_of(a.chunk - 1) == r || p.activation_received,
                  "{} runs before its RecvActivation", where());
        p.forward = true;
        break;
      case Kind::backward:
      case Kind::backward_input:
        NDT_CHECK(p.forward, "{} runs before its Forward", where());
        NDT_CHECK(!p.input_gradient, "{}: this micro-batch's backward of the chunk already ran", where());
        NDT_CHECK(a.chunk == chunks - 1 || at(mb, seq, a.chunk + 1).input_gradient,
                  "{} runs before the backward of chunk {} (backward goes in descending chunk order)", where(),
                  a.chunk + 1);
        check_sequence_backward(a, seq == k - 1 || at(mb, seq + 1, a.chunk).input_gradient, open_backward, where());
        NDT_CHECK(a.chunk == chunks - 1 || shape.rank_of(a.chunk + 1) == r || p.gradient_received,
                  "{} runs before its RecvGradient", where());
        p.input_gradient = true;
        p.split = a.kind == Kind::backward_input;
        p.weight_gradient = !p.split;
        break;
      case Kind::backward_weight:
        NDT_CHECK(p.split, "{} without a BackwardInput before it", where());
        NDT_CHECK(!p.weight_gradient, "{} runs a second time", where());
        p.weight_gradient = true;
        break;
      case Kind::send_activation:
        NDT_CHECK(p.forward, "{} before the Forward that produces it", where());
        break;
      case Kind::send_gradient:
        NDT_CHECK(p.input_gradient, "{} before the backward that produces it", where());
        break;
      case Kind::recv_activation: p.activation_received = true; break;
      case Kind::recv_gradient: p.gradient_received = true; break;
    }
  });
  for (int mb = 0; mb < shape.m; ++mb) {
    for (int seq = 0; seq < k; ++seq) {
      for (int c = 0; c < chunks; ++c) {
        const ChunkPasses& p = at(mb, seq, c);
        const char* missing = !p.forward          ? "Forward"
                              : !p.input_gradient  ? "Backward"
                              : !p.weight_gradient ? "BackwardWeight"
                                                   : nullptr;
        NDT_CHECK(missing == nullptr, "micro-batch {}{} never runs {} on chunk {} (rank {})", mb,
                  k > 1 ? fmt::format(" sequence chunk {}", seq) : "", missing, c, shape.rank_of(c));
      }
    }
  }
}

void check_pipeline_schedule(PipelineSchedule schedule, const PipelineShape& shape) {
  check_pipeline_actions(pipeline_actions_of_all_ranks(schedule, shape), shape);
}

}  // namespace ndt
