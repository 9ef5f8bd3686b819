#include "parallel/data/two_level_reduce.h"

#include "comm/watchdog.h"
#include "core/error.h"
#include "core/timing.h"
#include "kernels/kernels.h"

#include <fmt/format.h>

#include <chrono>
#include <vector>

namespace ndt {

std::string_view dp_reduction_name(DpReduction reduction) {
  switch (reduction) {
    case DpReduction::automatic: return "auto";
    case DpReduction::flat: return "flat";
    case DpReduction::hierarchical: return "hierarchical";
  }
  return "?";
}

DpReduction dp_reduction_from_name(std::string_view name) {
  for (DpReduction r : {DpReduction::automatic, DpReduction::flat, DpReduction::hierarchical}) {
    if (name == dp_reduction_name(r)) return r;
  }
  fail("parallel.dp_reduction = \"{}\" is not a reduction: auto, flat or hierarchical", name);
}

namespace {

// The three stages of one all-reduce, each started when the one before has completed.
class TwoLevelWork final : public Work {
 public:
  TwoLevelWork(TwoLevelAllReduce& levels, float* buf, size_t count)
      : levels_(levels), buf_(buf), count_(count) {
    const size_t k = static_cast<size_t>(levels.inside().size());
    shard_count_ = (count + k - 1) / k;
    padded_ = Tensor::zeros({static_cast<int64_t>(shard_count_ * k)}, DType::f32, MemTag::comm);
    shard_ = Tensor::empty({static_cast<int64_t>(shard_count_)}, DType::f32, MemTag::comm);
    kernels::copy(padded_.data<float>(), buf, static_cast<int64_t>(count));
    work_ = levels.inside().ireduce_scatter(padded_.data<float>(), shard_.data<float>(), shard_count_, DType::f32,
                                            ReduceOp::sum);
  }
  ~TwoLevelWork() override {
    if (stage_ < kDone) wait();
  }

  bool test() override {
    while (stage_ < kDone && work_->test()) advance();
    return stage_ == kDone;
  }

  void wait() override {
    while (stage_ < kDone) {
      work_->wait();
      advance();
    }
  }

 private:
  enum Stage { kReduceScatter, kAcross, kAllGather, kDone };

  void advance() {
    if (stage_ == kReduceScatter) {
      work_ = levels_.across().iall_reduce(shard_.data<float>(), shard_count_, DType::f32, ReduceOp::sum);
    } else if (stage_ == kAcross) {
      work_ = levels_.inside().iall_gather(shard_.data<float>(), padded_.data<float>(), shard_count_, DType::f32);
    } else if (stage_ == kAllGather) {
      kernels::copy(buf_, padded_.data<float>(), static_cast<int64_t>(count_));
      padded_ = Tensor(), shard_ = Tensor();
      levels_.fold_counters();
    }
    stage_ = static_cast<Stage>(stage_ + 1);
  }

  TwoLevelAllReduce& levels_;
  float* buf_;
  size_t count_, shard_count_ = 0;
  Tensor padded_, shard_;
  WorkHandle work_;
  Stage stage_ = kReduceScatter;
};

}  // namespace

TwoLevelAllReduce::TwoLevelAllReduce(Communicator& group) : group_(group) {
  inside_ = group.split_by_node(group.axis() + " (inside nodes)");
  // The nodes must hold as many of the group's ranks: the shards line up across them.
  int32_t sizes[2] = {inside_->size(), -inside_->size()};
  group.all_reduce(sizes, 2, DType::i32, ReduceOp::max);
  NDT_CHECK(sizes[0] == -sizes[1], "the two-level reduction over mesh axis \"{}\" needs as many of its ranks on every "
            "node, but nodes hold between {} and {}", group.axis(), -sizes[1], sizes[0]);
  across_ = group.split(inside_->rank(), group.rank(), group.axis() + " (across nodes)");
  // One rank per node: every message of the second level crosses nodes.
  std::vector<int> nodes(static_cast<size_t>(across_->size()));
  for (size_t n = 0; n < nodes.size(); ++n) nodes[n] = static_cast<int>(n);
  across_->set_member_nodes(std::move(nodes));
  across_->set_peers_on_other_hosts(group.peers_on_other_hosts());
}

void TwoLevelAllReduce::fold_counters() {
  for (Communicator* level : {inside_.get(), across_.get()}) {
    for (size_t op = 0; op < kNumCommOps; ++op) {
      CommCounter& from = level->stats().ops[op];
      CommCounter& into = group_.stats().ops[op];
      into.calls += from.calls, into.payload_bytes += from.payload_bytes, into.wire_bytes += from.wire_bytes;
      into.inter_node_wire_bytes += from.inter_node_wire_bytes, into.wait_seconds += from.wait_seconds;
      from = CommCounter{};
    }
  }
}

WorkHandle TwoLevelAllReduce::start(float* buf, size_t count) {
  return std::make_unique<TwoLevelWork>(*this, buf, count);
}

std::string ReductionTiming::describe(size_t bytes) const {
  return fmt::format("{}: {:.1f} ms against {} {:.1f} ms for {}", hierarchical_faster() ? "hierarchical" : "flat",
                     1e3 * (hierarchical_faster() ? hierarchical_s : flat_s),
                     hierarchical_faster() ? "flat" : "hierarchical", 1e3 * (hierarchical_faster() ? flat_s : hierarchical_s),
                     format_bytes(static_cast<int64_t>(bytes)));
}

ReductionTiming time_reductions(Communicator& group, TwoLevelAllReduce& levels, size_t floats) {
  std::vector<float> buffer(floats, 1.0f);
  std::vector<double> flat, two;
  for (int round = 0; round < 3; ++round) {
    group.barrier();
    auto t0 = std::chrono::steady_clock::now();
    group.all_reduce(buffer.data(), floats, DType::f32, ReduceOp::sum);
    flat.push_back(seconds_since(t0));
    group.barrier();
    t0 = std::chrono::steady_clock::now();
    levels.start(buffer.data(), floats)->wait();
    two.push_back(seconds_since(t0));
  }
  float slowest[2] = {static_cast<float>(median(flat)), static_cast<float>(median(two))};
  group.all_reduce(slowest, 2, DType::f32, ReduceOp::max);
  return {slowest[0], slowest[1]};
}

}  // namespace ndt
