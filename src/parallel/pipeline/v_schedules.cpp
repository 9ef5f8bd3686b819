#include "parallel/pipeline/v_schedules.h"

#include <algorithm>
#include <array>
#include <deque>
#include <utility>

namespace ndt {

namespace {

using Kind = PipelineActionKind;

// One rank's compute order over its two chunks of the V: `down` is chunk rank (the first
// leg), `up` chunk 2 pp - 1 - rank (the second). Each pass of a chunk takes that chunk's
// next micro-batch, so a chunk sees its micro-batches in order in every kind of pass.
class VOrder {
 public:
  static constexpr int down = 0, up = 1;

  VOrder(const PipelineShape& shape, int rank) : chunk_{rank, 2 * shape.pp - 1 - rank} {}

  void forward(int leg) { emit(Kind::forward, leg, forwards_[leg]++); }
  // F&B: the forward of one leg and the full backward of the other as one pair.
  void forward_backward(int forward_leg, int backward_leg) {
    forward(forward_leg);
    paired_.back() = 1;
    backward(backward_leg);
  }
  void backward(int leg) { emit(Kind::backward, leg, backwards_[leg]++); }
  // BackwardInput; its BackwardWeight waits in a queue for weight_of_queue().
  void backward_input(int leg) {
    queue_.emplace_back(leg, backwards_[leg]);
    emit(Kind::backward_input, leg, backwards_[leg]++);
  }
  // The weight pass of the oldest BackwardInput still without one.
  void weight_of_queue() {
    const auto [leg, mb] = queue_.front();
    queue_.pop_front();
    emit(Kind::backward_weight, leg, mb);
  }
  // BackwardInput, then at once its BackwardWeight.
  void backward_split(int leg) {
    backward_input(leg);
    weight_of_queue();
  }
  int forwards(int leg) const { return forwards_[leg]; }
  bool weights_queued() const { return !queue_.empty(); }

  // The order, without the micro-batches from m on (a pair losing one of its two
  // actions is no pair any more).
  VComputeOrder below(int m) const {
    VComputeOrder kept;
    for (size_t i = 0; i < out_.size(); ++i) {
      if (out_[i].micro_batch >= m) continue;
      kept.actions.push_back(out_[i]);
      kept.paired.push_back(paired_[i] && out_[i + 1].micro_batch < m);
    }
    return kept;
  }

 private:
  void emit(Kind kind, int leg, int mb) {
    out_.push_back({kind, mb, chunk_[leg], -1});
    paired_.push_back(0);
  }

  std::array<int, 2> chunk_;
  std::array<int, 2> forwards_{}, backwards_{};
  std::deque<std::pair<int, int>> queue_;  // (leg, micro-batch) of BackwardInputs
  std::vector<PipelineAction> out_;
  std::vector<char> paired_;
};

}  // namespace

// ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 6, figure of ZB-V),
// for rank r of p over m' = max(m, 2p - 1) micro-batches:
//   warm-up   2(p - r) - 1 forwards of the first leg, then r times a forward of the second
//             leg and one of the first, then p - r times F, I, W of the second leg;
//   steady    F, I, W of the first leg, then of the second, while forwards are left;
//   cool-down r times I of the first leg and of the second, p - r times I of the first
//             leg and the oldest weight pass owed, then the rest owed, oldest first.
// Rank p - 1 runs its two legs back to back: its second-leg forward takes the first
// leg's output on the same rank. A rank holds at most 2p chunk-activations.
VComputeOrder zb_v_compute(const PipelineShape& shape, int rank) {
  const int p = shape.pp, m = std::max(shape.m, 2 * p - 1);
  VOrder o(shape, rank);
  for (int i = 0; i < 2 * (p - rank) - 1; ++i) o.forward(VOrder::down);
  for (int i = 0; i < rank; ++i) o.forward(VOrder::up), o.forward(VOrder::down);
  for (int i = 0; i < p - rank; ++i) o.forward(VOrder::up), o.backward_split(VOrder::up);
  while (o.forwards(VOrder::up) < m) {
    if (o.forwards(VOrder::down) < m) o.forward(VOrder::down);
    o.backward_split(VOrder::down);
    o.forward(VOrder::up);
    o.backward_split(VOrder::up);
  }
  for (int i = 0; i < rank; ++i) o.backward_input(VOrder::down), o.backward_input(VOrder::up);
  for (int i = 0; i < p - rank; ++i) o.backward_split(VOrder::down);
  while (o.weights_queued()) o.weight_of_queue();
  return o.below(shape.m);
}

// DualPipeV (DeepSeek, github.com/deepseek-ai/DualPipe, dualpipe/dualpipev.py), for
// rank r of p over m' = max(m, 2p) micro-batches, in its 8 phases. F&B is the forward
// of one leg paired with the full backward of the other: on a GPU the reference overlaps
// the two (one's communication under the other's compute); here they run one after the
// other, F then B, but as in the reference the pair starts once both inputs are there.
//   1  2(p - r - 1) forwards of the first leg
//   2  r + 1 times: F first leg, F second leg
//   3  p - r - 1 times: I second leg (weight queued), the oldest queued W, F second leg
//   4  m' - 2p + r + 1 times: F&B (forward first leg, backward second), F&B (forward
//      second leg, backward first); the first F&B of rank p - 1 is not paired
//   5  p - r - 1 times: B second leg, F&B (forward second leg, backward first)
//   6  r + 1 times: backward of the second leg and of the first, split (weight queued)
//      from the middle on: from its second leg at odd r, its first leg at even r
//   7  p - r - 1 times: the oldest queued W, I first leg (weight queued)
//   8  r + 1 times the oldest queued W.
VComputeOrder dualpipev_compute(const PipelineShape& shape, int rank) {
  const int p = shape.pp, m = std::max(shape.m, 2 * p);
  VOrder o(shape, rank);
  for (int i = 0; i < 2 * (p - rank - 1); ++i) o.forward(VOrder::down);
  for (int i = 0; i < rank + 1; ++i) o.forward(VOrder::down), o.forward(VOrder::up);
  for (int i = 0; i < p - rank - 1; ++i) {
    o.backward_input(VOrder::up);
    o.weight_of_queue();
    o.forward(VOrder::up);
  }
  for (int i = 0; i < m - 2 * p + rank + 1; ++i) {
    if (i == 0 && rank == p - 1) {
      o.forward(VOrder::down);  // as the reference: not paired, the backward's input is not there yet
      o.backward(VOrder::up);
    } else {
      o.forward_backward(VOrder::down, VOrder::up);
    }
    o.forward_backward(VOrder::up, VOrder::down);
  }
  for (int i = 0; i < p - rank - 1; ++i) o.backward(VOrder::up), o.forward_backward(VOrder::up, VOrder::down);
  for (int i = 0; i < rank + 1; ++i) {
    const bool middle = i >= (rank + 1) / 2;  // split from here on
    const bool up_split = middle && (rank % 2 == 1 || i > (rank + 1) / 2);
    up_split ? o.backward_input(VOrder::up) : o.backward(VOrder::up);
    middle ? o.backward_input(VOrder::down) : o.backward(VOrder::down);
  }
  for (int i = 0; i < p - rank - 1; ++i) o.weight_of_queue(), o.backward_input(VOrder::down);
  while (o.weights_queued()) o.weight_of_queue();
  return o.below(shape.m);
}

}  // namespace ndt
