#include "parallel/offload_model.h"

#include "core/error.h"

#include <algorithm>

namespace ndt {

namespace {

// Per unit: elements of this rank's parameters (Psi's share) and of its padded shards.
struct UnitSizes {
  std::vector<int64_t> full, shard;
};

UnitSizes unit_sizes(const std::vector<ParameterSpec>& specs, int dp_shard, int zero_stage, int ep) {
  UnitSizes u;
  for (const ParameterSpec& s : specs) {
    const size_t unit = static_cast<size_t>(s.unit);
    if (u.full.size() <= unit) u.full.resize(unit + 1, 0), u.shard.resize(unit + 1, 0);
    const int split = s.expert ? ep : 1, n = zero_stage == 0 ? 1 : dp_shard / split;
    const int64_t numel = shape_numel(s.logical_shape) / split;
    const int64_t rows = s.logical_shape.empty() ? 1 : s.logical_shape[0] / split;
    const int64_t row_numel = rows == 0 ? 0 : numel / rows;
    u.full[unit] += numel;
    u.shard[unit] += (rows + n - 1) / n * row_numel;
  }
  return u;
}

// One step of FSDP (stage 3: every group gathered, forward then backward; stage 2: only
// its gradient buffers), following parallel/data/fsdp.cpp's hooks on one rank: the most
// bytes the params and grads tags hold. Groups: the root (units 0 and U - 1), then each
// block. `rounded`: each unit's shard in whole chunks (parameter offload's read buffers).
class FsdpSchedule {
 public:
  FsdpSchedule(const UnitSizes& sizes, std::vector<int64_t> rounded, const OffloadSettings& o, int64_t value_bytes)
      : units_(static_cast<int>(sizes.full.size())), o_(o), value_bytes_(value_bytes) {
    const size_t groups = static_cast<size_t>(std::max(1, units_ - 1));
    v_.assign(groups, 0), r_.assign(groups, 0);
    for (int u = 0; u < units_; ++u) v_[group(u)] += sizes.full[u], r_[group(u)] += rounded[static_cast<size_t>(u)];
    reads_.assign(groups, 0), values_.assign(groups, 0), gathering_.assign(groups, 0), grads_.assign(groups, 0);
  }
  // Params tag: the stage's gathers over forward and backward, from `base` (shards in memory).
  int64_t params_peak(int64_t base) {
    cur_ = peak_ = base;
    for (int u = 0; u < units_; ++u) {
      gather_for(u, +1);
      if (group(u) != 0 && o_.reshard_after_forward) release(group(u));
    }
    for (int u = units_ - 1; u >= 0; --u) {
      gather_for(u, -1);
      if (u == first_unit(group(u))) release(group(u));
    }
    return peak_;
  }
  // Grads tag: each group's gradient buffer from its first backward to its reduce-scatter;
  // with parameter offload the shard buffers of the reduced groups, two at most.
  int64_t grads_peak(int64_t base) {
    cur_ = peak_ = base;
    std::vector<size_t> pending;
    for (int u = units_ - 1; u >= 0; --u) {
      const size_t g = group(u);
      if (!grads_[g]) grads_[g] = 1, add(4 * v_[g]);
      if (g != 0) {  // blocks poll between their kernels: reduce-scatters started before finish
        for (size_t p : pending) finish_reduce(p);
        pending.clear();
      }
      if (u == first_unit(g)) grads_[g] = 0, cur_ -= 4 * v_[g], pending.push_back(g);
    }
    std::sort(pending.begin(), pending.end());  // finish_backward: in group order
    for (size_t p : pending) finish_reduce(p);
    return peak_;
  }

 private:
  size_t group(int u) const { return u == 0 || u == units_ - 1 ? 0 : static_cast<size_t>(u); }
  int first_unit(size_t g) const { return static_cast<int>(g); }
  void add(int64_t bytes) { cur_ += bytes, peak_ = std::max(peak_, cur_); }
  void read(size_t g) {
    if (!reads_[g] && r_[g] > 0) reads_[g] = 1, add(4 * r_[g]);
  }
  void start_gather(size_t g) {
    if (values_[g] || gathering_[g]) return;
    if (o_.params) read(g), reads_[g] = 0, cur_ -= 4 * r_[g];
    gathering_[g] = 1;
  }
  void release(size_t g) {
    if (values_[g]) cur_ -= v_[g] * value_bytes_;
    if (reads_[g]) cur_ -= 4 * r_[g];
    values_[g] = gathering_[g] = reads_[g] = 0;
  }
  void gather_for(int u, int direction) {
    for (int k = 0; o_.params && k <= o_.prefetch; ++k) {  // read ahead
      const int next = u + direction * k;
      if (next < 0 || next >= units_) break;
      if (!values_[group(next)] && !gathering_[group(next)]) read(group(next));
    }
    start_gather(group(u));
    const int next = u + direction;
    if (o_.gather_prefetch && next >= 0 && next < units_) start_gather(group(next));
    if (!values_[group(u)]) gathering_[group(u)] = 0, values_[group(u)] = 1, add(v_[group(u)] * value_bytes_);
  }
  void finish_reduce(size_t g) {
    if (!o_.params) return;
    add(4 * r_[g]);
    if (writing_ >= 0 && static_cast<size_t>(writing_) != g) cur_ -= 4 * r_[static_cast<size_t>(writing_)];
    writing_ = static_cast<int64_t>(g);
  }

  int units_;
  OffloadSettings o_;
  int64_t value_bytes_;
  std::vector<int64_t> v_, r_;
  std::vector<char> reads_, values_, gathering_, grads_;
  int64_t cur_ = 0, peak_ = 0, writing_ = -1;
};

}  // namespace

TieredStates predict_tiered_states(const std::vector<ParameterSpec>& specs, int dp_shard, int zero_stage,
                                   const OffloadSettings& o, DType compute, int ep) {
  NDT_CHECK(!o.optimizer || zero_stage >= 1, "offload.optimizer = \"disk\" needs parallel.zero_stage >= 1");
  NDT_CHECK(!o.params || (o.optimizer && zero_stage == 3),
            "offload.params = \"disk\" needs parallel.zero_stage = 3 and offload.optimizer = \"disk\"");
  NDT_CHECK(o.chunk_bytes >= 4096 && o.chunk_bytes % 4096 == 0, "offload.chunk_mb: {} bytes", o.chunk_bytes);
  const ModelStateBytes memory = predict_model_states(specs, dp_shard, zero_stage, compute, ep);
  const UnitSizes sizes = unit_sizes(specs, dp_shard, zero_stage, ep);
  const int64_t chunk = o.chunk_bytes / 4;
  std::vector<int64_t> rounded;
  int64_t psi = 0, psi_s = 0, chunked = 0;
  for (size_t u = 0; u < sizes.full.size(); ++u) {
    rounded.push_back((sizes.shard[u] + chunk - 1) / chunk * chunk);
    psi += sizes.full[u], psi_s += sizes.shard[u], chunked += rounded.back();
  }
  const int64_t copy = compute == DType::f32 ? 0 : static_cast<int64_t>(dtype_size(compute));
  const int64_t stream = (o.prefetch + 2) * o.chunk_bytes;  // per streamed file
  TieredStates t;
  t.resident = memory;
  if (o.optimizer) t.resident.optimizer = 0, t.disk.optimizer = 8 * chunked;
  if (o.params) t.resident.params = t.resident.grads = 0, t.disk.params = t.disk.grads = 4 * chunked;

  t.peak.optimizer = o.optimizer ? 2 * stream : memory.optimizer;
  FsdpSchedule schedule(sizes, rounded, o, 4 + copy);
  if (zero_stage <= 1) {
    t.peak.params = memory.params;
    t.peak.grads = 4 * psi + (zero_stage == 1 ? 4 * psi_s : 0);
  } else if (zero_stage == 2) {
    t.peak.params = memory.params;
    t.peak.grads = schedule.grads_peak(4 * psi_s);
  } else {
    t.peak.params = schedule.params_peak(o.params ? 0 : 4 * psi_s);
    t.peak.grads = schedule.grads_peak(o.params ? 0 : 4 * psi_s);
    if (o.params) t.peak.params = std::max(t.peak.params, stream), t.peak.grads = std::max(t.peak.grads, stream);
  }

  if (o.optimizer) t.read_bytes = t.write_bytes = 8 * chunked;
  t.stream_bytes = t.read_bytes + t.write_bytes + (o.params ? 4 * 4 * chunked : 0);  // + norm and step: G, P, G, P
  if (o.params) {
    int64_t gathered = 4 * (rounded.front() + rounded.back());  // the root, once per micro-batch
    for (size_t u = 1; u + 1 < rounded.size(); ++u) gathered += 4 * rounded[u] * (o.reshard_after_forward ? 2 : 1);
    const int64_t m = o.micro_batches;
    t.read_bytes += m * gathered + (m - 1) * 4 * chunked + 4 * chunked + 8 * chunked;  // + norm, step's P and G
    t.write_bytes += m * 4 * chunked + 4 * chunked;                                      // + step's P
  }
  return t;
}

}  // namespace ndt
