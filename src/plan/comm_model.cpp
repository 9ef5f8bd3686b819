#include "plan/comm_model.h"

#include "core/error.h"
#include "model/matmul.h"
#include "model/transformer.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stages.h"
#include "parallel/tensor/tensor_parallel.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

namespace {

int64_t total(const std::array<OpVolume, kNumCommOps>& ops, int64_t OpVolume::*field) {
  int64_t n = 0;
  for (const OpVolume& o : ops) n += o.*field;
  return n;
}

}  // namespace

int64_t AxisVolume::calls() const { return total(ops, &OpVolume::calls); }
int64_t AxisVolume::payload_bytes() const { return total(ops, &OpVolume::payload_bytes); }
int64_t AxisVolume::wire_bytes() const { return total(ops, &OpVolume::wire_bytes); }

namespace {

constexpr int64_t kF32 = 4;

// `times` calls of op with this payload over a group of n ranks (wire per call, rounded
// down as the counters round it).
void add(AxisVolume& v, CommOp op, int64_t payload, int n, int64_t times = 1) {
  if (times <= 0) return;
  OpVolume& o = v[op];
  o.calls += times;
  o.payload_bytes += payload * times;
  o.wire_bytes += comm_wire_bytes(op, payload, n) * times;
}

// all_to_all_v under balanced routing: of the payload, the blocks for the other ranks.
void add_all_to_all_v(AxisVolume& v, int64_t payload, int n, int64_t times) {
  if (times <= 0) return;
  OpVolume& o = v[CommOp::all_to_all_v];
  o.calls += times;
  o.payload_bytes += payload * times;
  o.wire_bytes += (n - 1) * payload / n * times;
}

// A parameter as the rank's store holds it after parallelize(): its tp and ep blocks,
// no rows when another pipeline stage holds it.
struct LocalParam {
  int64_t rows = 0;       // local_shape[0]
  int64_t row_numel = 0;  // elements per row
  int unit = 0;
  bool expert = false;      // sharded on ep (its own shard group under ZeRO, edp under DDP)
  bool tp_partial = false;  // gradient Partial on tp: summed by PartialGradients
  bool matmul_only = false; // FSDP gathers it in the compute dtype
  bool block_matrix = false; // a block's 2-D weight (fp8 keeps amaxes of each)
  bool wte = false;          // the token embedding (tied: the output layer too)
  int64_t numel() const { return rows * row_numel; }
};

struct UnitParams {
  std::vector<LocalParam> params;
  std::vector<int64_t> partial_numel;  // per unit: its tp-partial gradients' elements (experts' aside)
};

// Everything one prediction needs, derived once from the config.
struct Layout {
  explicit Layout(const RunConfig& config) : c(config) {}
  const RunConfig& c;
  MeshShape mesh;
  int stage = 0;
  int units = 0;
  std::vector<char> local_units;  // empty: all
  PipelineStages stages;          // pp > 1
  PipelineShape shape;            // pp > 1: the schedule's, with its placement
  int pp_chunks = 1;
  bool holds_head = true;
  // The parameters, shared with other predictions of the same model, tp, ep, sequence
  // parallel and stage (make_layout keeps them per thread: a planner scores thousands
  // of layouts of one model).
  std::shared_ptr<const UnitParams> unit_params;
  const std::vector<LocalParam>& params() const { return unit_params->params; }
  int64_t micro = 0, m = 0;  // rows per micro-batch, micro-batches per step
  int64_t N = 0, Nl = 0;     // rows of a micro-batch on this rank (T / cp tokens each); outside tp regions
  int64_t C = 0;
  bool sp = false;  // rows split over tp
  int tp = 1, cp = 1, ep = 1, pp = 1;

  std::array<int, kNumAxes> sizes{};  // mesh.size of each axis, looked up once
  bool local(int unit) const { return local_units.empty() || local_units[static_cast<size_t>(unit)] != 0; }
  int size(Axis a) const { return sizes[static_cast<size_t>(a)]; }
  // The communicator the counters of axis a belong to (aliases resolved).
  Axis comm(Axis a) const {
    if (a == Axis::edp && ep == 1) return comm(Axis::dp_cp);
    if (a == Axis::edp_shard && ep == 1) return comm(Axis::dp_shard_cp);
    if (a == Axis::dp_shard_cp && cp == 1) return Axis::dp_shard;
    if (a == Axis::dp_cp && cp == 1) return Axis::dp;
    if (a == Axis::cp_ring && mesh.cp_ulysses == 1) return Axis::cp;
    return a;
  }
  // Shard and reduce groups: the experts' (under ep > 1) and the rest.
  Axis shard_axis(bool expert) const { return comm(expert && ep > 1 ? Axis::edp_shard : Axis::dp_shard_cp); }
  Axis reduce_axis(bool expert) const { return comm(expert && ep > 1 ? Axis::edp : Axis::dp_cp); }
  int64_t padded_numel(const LocalParam& p) const {
    const int n = size(shard_axis(p.expert));
    return (p.rows + n - 1) / n * p.row_numel;
  }
};

// The parameter specs of every unit without naming 126 layers: the specs of a model cut
// to its first MoE period (or one block), each block's taken from the block of its kind.
struct UnitSpecs {
  std::vector<ParameterSpec> embedding, head, dense_block, moe_block;
};

UnitSpecs unit_specs(const ModelConfig& m) {
  ModelConfig cut = m;
  cut.n_layer = m.is_moe() ? std::min(m.n_layer, m.moe_every) : 1;
  UnitSpecs u;
  for (const ParameterSpec& s : model_parameter_specs(cut)) {
    if (s.unit == 0) {
      u.embedding.push_back(s);
    } else if (s.unit == cut.n_layer + 1) {
      u.head.push_back(s);
    } else if (s.unit == 1) {
      (cut.is_moe_block(0) ? u.moe_block : u.dense_block).push_back(s);
    } else if (s.unit == cut.n_layer && cut.is_moe_block(cut.n_layer - 1)) {
      u.moe_block.push_back(s);
    }
  }
  return u;
}

std::shared_ptr<const UnitParams> build_unit_params(const Layout& l, const RunConfig& c) {
  const ModelConfig& m = c.model;
  const UnitSpecs specs = unit_specs(m);
  // Each kind of unit's parameters on this rank, worked out once (a 405B model has 126
  // blocks of two kinds at most); `unit` is a representative for block_matrix.
  auto local_params = [&](const std::vector<ParameterSpec>& unit_specs, int unit) {
    std::vector<LocalParam> params;
    for (const ParameterSpec& s : unit_specs) {
      LocalParam p;
      Shape shape = s.logical_shape;
      if (const auto placement = tensor_parallel_placement(s, l.tp)) shape[static_cast<size_t>(placement->dim)] /= l.tp;
      p.expert = s.expert && l.ep > 1;
      if (p.expert) shape[0] /= l.ep;
      p.unit = unit;
      // A frozen parameter has no gradient for PartialGradients to sum.
      p.tp_partial = !s.frozen && tensor_parallel_grad_partial(s, l.tp, c.sequence_parallel);
      p.block_matrix = s.logical_shape.size() == 2 && unit > 0 && unit < l.units - 1;
      p.matmul_only = used_only_in_matmuls(s);
      p.wte = s.name == "wte.weight";
      p.rows = shape.empty() ? 1 : shape[0];
      p.row_numel = p.rows == 0 ? 0 : shape_numel(shape) / p.rows;
      params.push_back(p);
    }
    return params;
  };
  auto out = std::make_shared<UnitParams>();
  auto append = [&](const std::vector<LocalParam>& kind, int unit) {
    for (LocalParam p : kind) {
      p.unit = unit;
      const bool copy = l.pp > 1 && l.holds_head && m.tied_embeddings && p.wte && !l.local(unit);
      if (!(l.local(unit) || copy)) p.rows = 0;
      out->params.push_back(p);
    }
  };
  const std::vector<LocalParam> dense = local_params(specs.dense_block, 1), moe = local_params(specs.moe_block, 1);
  out->params.reserve(specs.embedding.size() + specs.head.size() +
                      static_cast<size_t>(m.n_layer) * std::max(dense.size(), moe.size()));
  append(local_params(specs.embedding, 0), 0);
  for (int layer = 0; layer < m.n_layer; ++layer) append(m.is_moe_block(layer) ? moe : dense, 1 + layer);
  append(local_params(specs.head, l.units - 1), l.units - 1);
  out->partial_numel.assign(static_cast<size_t>(l.units), 0);
  for (const LocalParam& p : out->params) {
    if (p.tp_partial && !p.expert) out->partial_numel[static_cast<size_t>(p.unit)] += p.numel();
  }
  return out;
}

// build_unit_params, remembered per thread by what it depends on: the model's shape, tp,
// ep, sequence parallel and the units this stage holds.
std::shared_ptr<const UnitParams> unit_params(const Layout& l, const RunConfig& c) {
  const ModelConfig& m = c.model;
  const int fields[] = {static_cast<int>(m.arch), m.vocab_size, m.max_seq_len, m.n_layer, m.n_head, m.n_kv_head,
                        m.d_model, m.d_ff, m.qk_norm, m.tied_embeddings, m.n_experts, m.moe_top_k, m.moe_every,
                        m.moe_d_ff, m.moe_shared_d_ff, l.tp, l.ep, l.pp, c.sequence_parallel, l.holds_head};
  std::string key(reinterpret_cast<const char*>(fields), sizeof fields);
  key.append(l.local_units.begin(), l.local_units.end());
  thread_local std::map<std::string, std::shared_ptr<const UnitParams>> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() > 4096) cache.clear();
  return cache.emplace(std::move(key), build_unit_params(l, c)).first->second;
}

// c: resolved (RunConfig::resolved) for the job.
Layout make_layout(const RunConfig& c, int pp_stage, const PipelineStages* stages) {
  Layout l(c);
  l.mesh = c.mesh;
  for (size_t a = 0; a < kNumAxes; ++a) l.sizes[a] = l.mesh.size(static_cast<Axis>(a));
  l.tp = l.mesh.tp, l.cp = l.mesh.cp, l.ep = l.mesh.ep, l.pp = l.mesh.pp;
  NDT_CHECK(pp_stage >= 0 && pp_stage < l.pp, "comm model: pipeline stage {} of parallel.pp = {}", pp_stage, l.pp);
  l.stage = pp_stage;
  const ModelConfig& m = c.model;
  l.units = m.n_layer + 2;
  if (l.pp > 1) {
    l.stages = stages ? *stages
                      : partition_pipeline(m, c.seq_len, l.pp * c.pp_virtual_stages, parse_pipeline_layers(c.pp_layers));
    NDT_CHECK(l.stages.chunks() == l.pp * c.pp_virtual_stages, "comm model: a partition into {} chunks for pp x v = {}",
              l.stages.chunks(), l.pp * c.pp_virtual_stages);
    l.shape = pipeline_shape(c.pp_schedule, l.pp, c.pp_virtual_stages, c.micro_batches());
    l.local_units = l.stages.local_units(pp_stage, l.shape);
    l.pp_chunks = l.stages.chunks();
    l.holds_head = l.local_units.back() != 0;
  }
  l.sp = c.sequence_parallel && l.tp > 1;
  l.micro = c.micro_batch_size;
  l.m = c.micro_batches();
  l.N = l.micro * (c.seq_len / l.cp);
  l.Nl = l.sp ? l.N / l.tp : l.N;
  l.C = m.d_model;
  l.unit_params = unit_params(l, c);
  return l;
}

// Volumes accumulated per communicator (Layout::comm), then copied to the aliases.
struct Acc {
  explicit Acc(const Layout& layout) : l(layout) {}
  const Layout& l;
  StepCommunication s;
  AxisVolume& on(Axis a) { return s[l.comm(a)]; }
  void op(Axis a, CommOp op, int64_t payload, int64_t times = 1) { add(on(a), op, payload, l.size(a), times); }
};

// ---- tensor parallel: the Megatron regions on a [N, C] activation, `times` micro-batches
void column_input_forward(Acc& a, int64_t times) {
  if (a.l.sp) a.op(Axis::tp, CommOp::all_gather, a.l.N * a.l.C * kF32, times);
}
void column_input_backward(Acc& a, int64_t times) {
  if (a.l.tp == 1) return;
  a.op(Axis::tp, a.l.sp ? CommOp::reduce_scatter : CommOp::all_reduce, a.l.N * a.l.C * kF32, times);
}
void row_output_forward(Acc& a, int64_t times) {
  if (a.l.tp == 1) return;
  a.op(Axis::tp, a.l.sp ? CommOp::reduce_scatter : CommOp::all_reduce, a.l.N * a.l.C * kF32, times);
}
void row_output_backward(Acc& a, int64_t times) {
  if (a.l.sp) a.op(Axis::tp, CommOp::all_gather, a.l.N * a.l.C * kF32, times);
}
// PartialGradients::finish of a unit: one all-reduce of its tp-partial gradients.
void partial_gradients(Acc& a, int unit, int64_t times) {
  if (a.l.tp == 1) return;
  const int64_t numel = a.l.unit_params->partial_numel[static_cast<size_t>(unit)];
  if (numel > 0) a.op(Axis::tp, CommOp::all_reduce, numel * kF32, times);
}

// ---- context parallel: the attention core of one block
int64_t attention_dims(const Layout& l, bool queries) {
  const ModelConfig& m = l.c.model;
  return int64_t{queries ? m.n_head : m.kv_heads()} / l.tp * m.head_dim();
}
// USP: Ulysses' all-to-alls over cp_ulysses around a ring over cp_ring whose rows are
// cp_ulysses x this rank's with KD / cp_ulysses: its K/V block is 2 N KD floats, as plain ring's.
Axis ulysses_axis(const Layout& l) { return l.c.cp_mode == CpMode::usp ? Axis::cp_ulysses : Axis::cp; }
Axis ring_axis(const Layout& l) { return l.c.cp_mode == CpMode::usp ? Axis::cp_ring : Axis::cp; }
void attention_forward(Acc& a, int64_t times) {
  const Layout& l = a.l;
  if (l.cp == 1) return;
  const int64_t QD = attention_dims(l, true), KD = attention_dims(l, false);
  if (l.c.cp_mode != CpMode::ring) {  // q, k, v to heads, the output back
    a.op(ulysses_axis(l), CommOp::all_to_all, l.N * QD * kF32, 2 * times);
    a.op(ulysses_axis(l), CommOp::all_to_all, l.N * KD * kF32, 2 * times);
  }
  if (l.c.cp_mode == CpMode::ulysses) return;
  const int64_t block = 2 * l.N * KD * kF32;  // K and V of this rank's tokens, around the ring
  const int ring = l.size(ring_axis(l));
  a.op(ring_axis(l), CommOp::send, block, (ring - 1) * times);
  a.op(ring_axis(l), CommOp::recv, block, (ring - 1) * times);
}
void attention_backward(Acc& a, int64_t times) {
  const Layout& l = a.l;
  if (l.cp == 1) return;
  const int64_t QD = attention_dims(l, true), KD = attention_dims(l, false);
  if (l.c.cp_mode != CpMode::ring) {  // q, k, v, out, dout to heads; dq, dk, dv back
    a.op(ulysses_axis(l), CommOp::all_to_all, l.N * QD * kF32, 4 * times);
    a.op(ulysses_axis(l), CommOp::all_to_all, l.N * KD * kF32, 4 * times);
  }
  if (l.c.cp_mode == CpMode::ulysses) return;
  // K/V around the ring again, and the dK/dV sums one step further (home to their owner).
  const int64_t block = 2 * l.N * KD * kF32;
  const int ring = l.size(ring_axis(l));
  a.op(ring_axis(l), CommOp::send, block, (2 * ring - 1) * times);
  a.op(ring_axis(l), CommOp::recv, block, (2 * ring - 1) * times);
}

// ---- mixture of experts: routing statistics over cp, the exchange over ep
int64_t routed_row_bytes(const Layout& l) { return l.N * l.c.model.moe_top_k * l.C * kF32; }
void moe_forward(Acc& a, int64_t times) {
  const Layout& l = a.l;
  const int E = l.c.model.n_experts;
  if (l.cp > 1) a.op(Axis::cp, CommOp::all_reduce, 2 * l.micro * E * kF32, times);  // per-sequence counts, score sums
  if (l.ep == 1) return;
  a.op(Axis::ep, CommOp::all_gather, int64_t{l.ep} * E * 4, times);  // every rank's int32 row counts
  add_all_to_all_v(a.on(Axis::ep), routed_row_bytes(l), l.ep, 2 * times);  // dispatch, combine
}
void moe_backward(Acc& a, int64_t times) {
  if (a.l.ep > 1) add_all_to_all_v(a.on(Axis::ep), routed_row_bytes(a.l), a.l.ep, 2 * times);
}

// ---- one unit's forward and backward (with its recompute), `times` micro-batches
void block_forward(Acc& a, int layer, int64_t times) {
  column_input_forward(a, 2 * times);  // before q/k/v and before the MLP
  attention_forward(a, times);
  row_output_forward(a, 2 * times);  // attention output, MLP output
  if (a.l.c.model.is_moe_block(layer)) moe_forward(a, times);
}

void block_backward(Acc& a, int layer, int64_t times) {
  switch (a.l.c.activation_checkpointing.of_block(layer)) {
    case CheckpointMode::none: break;
    case CheckpointMode::full: block_forward(a, layer, times); break;
    case CheckpointMode::selective:
      column_input_forward(a, 2 * times);  // the two norms
      attention_forward(a, times);
      break;
  }
  row_output_backward(a, 2 * times);
  column_input_backward(a, 2 * times);
  attention_backward(a, times);
  if (a.l.c.model.is_moe_block(layer)) moe_backward(a, times);
  partial_gradients(a, 1 + layer, times);
}

void unit_forward(Acc& a, int u, int64_t times) {
  if (u == 0) {
    row_output_forward(a, times);  // the vocab-parallel lookup, summed
  } else if (u == a.l.units - 1) {
    column_input_forward(a, times);  // the output layer's input (the loss runs in backward)
  } else {
    block_forward(a, u - 1, times);
  }
}

void unit_backward(Acc& a, int u, int64_t times) {
  const Layout& l = a.l;
  if (u == 0) {
    row_output_backward(a, times);
    partial_gradients(a, 0, times);  // the position table under sequence parallel
  } else if (u == l.units - 1) {
    if (l.tp > 1) {  // the vocab-parallel loss: row maxima, then exp sums with the target logits, per chunk
      const int64_t chunk = l.c.loss_chunk_rows, full = l.N / chunk, rest = l.N % chunk;
      a.op(Axis::tp, CommOp::all_reduce, chunk * kF32, full * times);
      a.op(Axis::tp, CommOp::all_reduce, 2 * chunk * kF32, full * times);
      if (rest > 0) {
        a.op(Axis::tp, CommOp::all_reduce, rest * kF32, times);
        a.op(Axis::tp, CommOp::all_reduce, 2 * rest * kF32, times);
      }
    }
    column_input_backward(a, times);
    partial_gradients(a, u, times);  // the final norm under sequence parallel
  } else {
    block_backward(a, u - 1, times);
  }
}

// ---- data parallel
struct Bucket {
  size_t first = 0, end = 0;  // parameters [first, end)
  bool expert = false;
};

// make_gradient_buckets (parallel/data/buckets.h) on the local parameters.
std::vector<Bucket> make_gradient_buckets(const Layout& l) {
  const size_t bucket_bytes = static_cast<size_t>(l.c.bucket_mb * 1024 * 1024);
  const std::vector<LocalParam>& ps = l.params();
  std::vector<int64_t> offset(ps.size() + 1, 0);
  for (size_t p = 0; p < ps.size(); ++p) offset[p + 1] = offset[p] + ps[p].numel();
  std::vector<Bucket> buckets;
  size_t end_param = ps.size();
  for (size_t p = ps.size(); p-- > 0;) {
    const int64_t bytes = (offset[end_param] - offset[p]) * kF32;
    if (static_cast<size_t>(bytes) >= bucket_bytes || p == 0 || ps[p - 1].expert != ps[p].expert) {
      buckets.push_back({p, end_param, ps[p].expert});
      end_param = p;
    }
  }
  return buckets;
}

// make_gradient_buckets, remembered per thread for the same parameters and bucket size.
const std::vector<Bucket>& gradient_buckets(const Layout& l) {
  struct Cached {
    std::shared_ptr<const UnitParams> params;  // keeps the key's address from being reused
    std::vector<Bucket> buckets;
  };
  thread_local std::map<std::pair<const UnitParams*, double>, Cached> cache;
  const auto key = std::pair{l.unit_params.get(), l.c.bucket_mb};
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() > 4096) cache.clear();
    it = cache.emplace(key, Cached{l.unit_params, make_gradient_buckets(l)}).first;
  }
  return it->second.buckets;
}

void data_parallel(Acc& a) {  // DDP: each bucket all-reduced once per step
  const Layout& l = a.l;
  if (l.size(Axis::dp_cp) == 1) return;
  const int64_t element = static_cast<int64_t>(dtype_size(l.c.reduce_dtype));
  for (const Bucket& b : gradient_buckets(l)) {
    const Axis axis = l.reduce_axis(b.expert);
    if (l.size(axis) == 1) continue;
    int64_t numel = 0;
    for (size_t p = b.first; p < b.end; ++p) numel += l.params()[p].numel();
    a.op(axis, CommOp::all_reduce, numel * element, 1);
  }
}

void zero_stage1(Acc& a) {  // reduce-scatter per bucket, HSDP all-reduce, all-gather of the updated rows
  const Layout& l = a.l;
  const int64_t element = static_cast<int64_t>(dtype_size(l.c.reduce_dtype));
  for (const Bucket& b : gradient_buckets(l)) {
    const Axis axis = l.shard_axis(b.expert);
    const int n = l.size(axis);
    int64_t segment = 0;
    for (size_t p = b.first; p < b.end; ++p) segment += l.padded_numel(l.params()[p]);
    a.op(axis, CommOp::reduce_scatter, n * segment * element);
    if (l.mesh.dp_replicate > 1) a.op(Axis::dp_replicate, CommOp::all_reduce, segment * kF32);
    a.op(axis, CommOp::all_gather, n * segment * kF32);
  }
}

// FSDP (stages 2 and 3): the hooks' state machine (parallel/data/fsdp.cpp) over the step's
// unit events, counting its collectives.
class FsdpModel {
 public:
  explicit FsdpModel(Acc& a) : a_(a), l_(a.l) {
    // The groups' segments depend on the parameters and the shard groups' sizes only:
    // remembered per thread for the next prediction of the same.
    const DType gather_dtype = l_.c.precision.low() && !l_.c.precision.fp8 ? l_.c.precision.compute : DType::f32;
    const auto key = std::make_tuple(l_.unit_params.get(), l_.size(l_.shard_axis(false)), l_.size(l_.shard_axis(true)),
                                     static_cast<int>(gather_dtype), l_.c.reshard_after_forward);
    struct Cached {
      std::shared_ptr<const UnitParams> params;  // keeps the key's address from being reused
      std::vector<Group> groups;
      std::vector<size_t> group_of_unit;
    };
    thread_local std::map<decltype(key), Cached> cache;
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() > 4096) cache.clear();
      build(gather_dtype);
      it = cache.emplace(key, Cached{l_.unit_params, groups_, group_of_unit_}).first;
    } else {
      groups_ = it->second.groups, group_of_unit_ = it->second.group_of_unit;
    }
    gather_bytes_[0] = kF32;
    gather_bytes_[1] = static_cast<int64_t>(dtype_size(gather_dtype));
  }

  void build(DType gather_dtype) {
    const int U = l_.units;
    groups_.resize(static_cast<size_t>(U - 1));  // the root (units 0 and U - 1), then one per block
    for (int u = 0; u < U; ++u) group_of_unit_.push_back(u == 0 || u == U - 1 ? 0 : u);
    for (size_t g = 1; g < groups_.size(); ++g) groups_[g].reshard_after_forward = l_.c.reshard_after_forward;
    groups_[0].reshard_after_forward = false;
    for (int u = 0; u < U; ++u) {
      Group& g = groups_[group_of_unit_[static_cast<size_t>(u)]];
      if (l_.local(u) && (g.first_unit < 0 || u < g.first_unit)) g.first_unit = u;
    }
    // Per shard group: the reduce-scatter's segment, the gathers' segments by dtype.
    for (const LocalParam& p : l_.params()) {
      Group& g = groups_[group_of_unit_[static_cast<size_t>(p.unit)]];
      const int sg = p.expert ? 1 : 0;
      g.has[sg] = true;
      g.reduce_segment[sg] += l_.padded_numel(p);
      const bool low = gather_dtype != DType::f32 && p.matmul_only;
      g.gather_segment[sg][low ? 1 : 0] += l_.padded_numel(p);
      g.gather_has[sg][low ? 1 : 0] = true;
    }
  }

  void before_forward(int u) {
    if (!stage3()) return;
    Group& g = group(u);
    start_gather(g);
    if (l_.c.prefetch && u + 1 < l_.units) start_gather(group(u + 1));
    finish_gather(g);
  }
  void after_forward(int u) {
    Group& g = group(u);
    if (stage3() && g.reshard_after_forward) release(g);
  }
  void after_forward_only() {
    if (!stage3()) return;
    for (Group& g : groups_) release(g);
  }
  void before_backward(int u) {
    Group& g = group(u);
    if (stage3()) {
      start_gather(g);
      if (l_.c.prefetch && u > 0) start_gather(group(u - 1));
      finish_gather(g);
    }
    g.grads = true;
  }
  void after_backward(int u) {
    Group& g = group(u);
    if (u != g.first_unit) return;
    if (l_.pp == 1) start_reduce(g);
    if (!stage3()) return;
    release(g);
    if (u == 0) {
      for (Group& other : groups_) release(other);
    }
  }
  // Adds the gathers and reduce-scatters counted so far to the volumes.
  void flush() {
    const int64_t element = static_cast<int64_t>(dtype_size(l_.c.reduce_dtype));
    for (Group& g : groups_) {
      for (int sg = 0; sg < 2; ++sg) {
        const Axis axis = l_.shard_axis(sg == 1);
        for (int d = 0; d < 2; ++d) {
          if (g.gather_has[sg][d]) {
            a_.op(axis, CommOp::all_gather, l_.size(axis) * g.gather_segment[sg][d] * gather_bytes_[d], g.gathers);
          }
        }
        if (g.has[sg]) a_.op(axis, CommOp::reduce_scatter, l_.size(axis) * g.reduce_segment[sg] * element, g.reduces);
      }
      g.gathers = g.reduces = 0;
    }
  }
  // finish_backward of the step's last micro-step, and the optimizer step.
  void finish_step() {
    if (l_.pp > 1) {
      for (Group& g : groups_) {
        if (g.grads) start_reduce(g);
      }
    }
    flush();
    if (l_.mesh.dp_replicate > 1) {
      int64_t arena = 0;
      for (const LocalParam& p : l_.params()) arena += l_.padded_numel(p);
      a_.op(Axis::dp_replicate, CommOp::all_reduce, arena * kF32);
    }
    if (stage3()) return;
    for (Group& g : groups_) {  // stage 2: the updated rows of every group, per shard group
      for (int sg = 0; sg < 2; ++sg) {
        if (!g.has[sg]) continue;
        const Axis axis = l_.shard_axis(sg == 1);
        a_.op(axis, CommOp::all_gather, l_.size(axis) * g.reduce_segment[sg] * kF32);
      }
    }
  }

 private:
  struct Group {
    int first_unit = -1;
    bool reshard_after_forward = true;
    bool has[2] = {false, false};
    int64_t reduce_segment[2] = {0, 0};
    int64_t gather_segment[2][2] = {{0, 0}, {0, 0}};  // [shard group][f32, gather dtype]
    bool gather_has[2][2] = {{false, false}, {false, false}};
    bool values = false, gathering = false, grads = false;
    int64_t gathers = 0, reduces = 0;  // not yet added to the volumes
  };
  bool stage3() const { return l_.c.zero_stage == 3; }
  Group& group(int u) { return groups_[group_of_unit_[static_cast<size_t>(u)]]; }
  // A group's gathers and reduce-scatters are counted as they happen and added to the
  // volumes once, by flush(): the same collectives, far fewer additions.
  void start_gather(Group& g) {
    if (g.values || g.gathering) return;
    ++g.gathers;
    g.gathering = true;
  }
  void finish_gather(Group& g) {
    if (g.values) return;
    start_gather(g);
    g.gathering = false;
    g.values = true;
  }
  void release(Group& g) { g.values = g.gathering = false; }
  void start_reduce(Group& g) {
    ++g.reduces;
    g.grads = false;
  }

  Acc& a_;
  const Layout& l_;
  std::vector<Group> groups_;
  std::vector<size_t> group_of_unit_;
  int64_t gather_bytes_[2] = {kF32, kF32};
};

// The units' compute communication of the step and, under FSDP, its hooks.
void forward_backward(Acc& a) {
  const Layout& l = a.l;
  // Blocks of one kind (MoE or dense, and recompute mode) communicate alike: each kind
  // is counted once, times its local blocks.
  std::map<std::pair<bool, CheckpointMode>, std::pair<int, int64_t>> kinds;  // -> (a layer of it, blocks)
  for (int u = 0; u < l.units; ++u) {
    if (!l.local(u)) continue;
    if (u == 0 || u == l.units - 1) {
      unit_forward(a, u, l.m);
      unit_backward(a, u, l.m);
      continue;
    }
    const int layer = u - 1;
    auto& kind = kinds[{l.c.model.is_moe_block(layer), l.c.activation_checkpointing.of_block(layer)}];
    if (kind.second++ == 0) kind.first = layer;
  }
  for (const auto& [key, kind] : kinds) {
    block_forward(a, kind.first, l.m * kind.second);
    block_backward(a, kind.first, l.m * kind.second);
  }
  if (l.c.zero_stage < 2) return;
  FsdpModel fsdp(a);
  if (l.pp == 1) {  // every micro-step alike: forward 0 .. U-1, backward U-1 .. 0
    Acc one(l);
    FsdpModel single(one);
    for (int u = 0; u < l.units; ++u) single.before_forward(u), single.after_forward(u);
    for (int u = l.units - 1; u >= 0; --u) single.before_backward(u), single.after_backward(u);
    single.flush();
    for (size_t ax = 0; ax < kNumAxes; ++ax) {
      for (size_t op = 0; op < kNumCommOps; ++op) {
        const OpVolume& v = one.s.axes[ax].ops[op];
        OpVolume& to = a.s.axes[ax].ops[op];
        to.calls += v.calls * l.m, to.payload_bytes += v.payload_bytes * l.m, to.wire_bytes += v.wire_bytes * l.m;
      }
    }
  } else {
    const std::vector<int>& first = l.stages.first_unit;
    for (const PipelineAction& act : pipeline_actions(l.c.pp_schedule, l.shape, l.stage)) {
      const int begin = first[static_cast<size_t>(act.chunk)], end = first[static_cast<size_t>(act.chunk) + 1];
      switch (act.kind) {
        case PipelineActionKind::forward:
          for (int u = begin; u < end; ++u) fsdp.before_forward(u), fsdp.after_forward(u);
          break;
        case PipelineActionKind::backward:
          for (int u = end - 1; u >= begin; --u) fsdp.before_backward(u), fsdp.after_backward(u);
          break;
        case PipelineActionKind::backward_input:
          for (int u = end - 1; u >= begin; --u) fsdp.before_backward(u);
          break;
        case PipelineActionKind::backward_weight:
          for (int u = end - 1; u >= begin; --u) fsdp.after_backward(u);
          break;
        default: break;
      }
    }
    fsdp.after_forward_only();
  }
  fsdp.finish_step();
}

void pipeline_messages(Acc& a) {
  const Layout& l = a.l;
  if (l.pp == 1) return;
  const int64_t boundary = l.Nl * l.C * kF32;
  // A boundary travels only between chunks on different ranks (not between the two
  // middle chunks of a V, both on rank pp - 1).
  auto remote = [&](int chunk) { return chunk >= 0 && chunk < l.pp_chunks && l.shape.rank_of(chunk) != l.stage; };
  for (int chunk : l.shape.chunks_of(l.stage)) {
    const int64_t inputs = remote(chunk - 1) ? l.m : 0, outputs = remote(chunk + 1) ? l.m : 0;
    a.op(Axis::pp, CommOp::recv, boundary, inputs + outputs);  // activations in, gradients in
    a.op(Axis::pp, CommOp::send, boundary, inputs + outputs);  // gradients out, activations out
  }
}

// The norm: sums of squares over the shards, the experts over ep, then tp and pp.
void gradient_norm(Acc& a) {
  const Layout& l = a.l;
  if (l.c.zero_stage >= 1) {
    a.op(Axis::dp_shard_cp, CommOp::all_reduce, kF32);
    const bool counted = l.tp > 1 || l.pp > 1 || l.ep > 1;
    if (counted && l.ep > 1 && l.c.model.is_moe() && l.size(Axis::edp_shard) > 1) {
      a.op(Axis::edp_shard, CommOp::all_reduce, kF32);
    }
  }
  if (l.ep > 1) a.op(Axis::ep, CommOp::all_reduce, kF32);
  if (l.tp > 1) a.op(Axis::tp, CommOp::all_reduce, kF32);
  if (l.pp > 1) a.op(Axis::pp, CommOp::all_reduce, kF32);
}

void trainer_collectives(Acc& a) {
  const Layout& l = a.l;
  const RunConfig& c = l.c;
  const int world = static_cast<int>(l.mesh.product());
  if (c.model.is_moe()) add(a.s.world, CommOp::all_reduce, (6 + int64_t{c.model.n_experts}) * kF32, world);
  const int64_t losses = c.z_loss > 0 ? 2 : 1;  // the loss and the z term
  if (l.size(Axis::dp_cp) > 1) a.op(Axis::dp_cp, CommOp::all_reduce, losses * kF32);
  if (c.precision.fp8) {
    int64_t linears = 0;
    for (const LocalParam& p : l.params()) linears += p.block_matrix;
    add(a.s.world, CommOp::all_reduce, 3 * linears * kF32, world);
  }
  add(a.s.world, CommOp::all_reduce, kF32, world);  // every rank finite
  if (l.pp > 1) a.op(Axis::pp, CommOp::all_reduce, losses * kF32);  // from the stage with the head
  // A tied embedding's two copies (the first and the last chunk's ranks, unless one rank
  // holds both, as under the V placement), in whatever form the sync holds them.
  const bool two_copies = l.pp > 1 && l.shape.rank_of(0) != l.shape.rank_of(l.pp_chunks - 1);
  if (two_copies && c.model.tied_embeddings &&
      (l.stage == l.shape.rank_of(0) || l.stage == l.shape.rank_of(l.pp_chunks - 1))) {
    const LocalParam& wte = *std::find_if(l.params().begin(), l.params().end(), [](const LocalParam& p) { return p.wte; });
    const int64_t numel = c.zero_stage >= 1 ? l.padded_numel(wte) : wte.numel();
    add(a.s.tied_embedding, CommOp::all_reduce, numel * kF32, 2);
  }
}

}  // namespace

StepCommunication predict_step_communication(const RunConfig& config, int world_size, int pp_stage,
                                             const PipelineStages* stages) {
  const RunConfig resolved = config.resolved(world_size);
  const Layout l = make_layout(resolved, pp_stage, stages);
  Acc a(l);
  forward_backward(a);
  pipeline_messages(a);
  if (config.zero_stage == 0) data_parallel(a);
  if (config.zero_stage == 1) zero_stage1(a);
  gradient_norm(a);
  trainer_collectives(a);
  StepCommunication out = a.s;
  for (size_t ax = 0; ax < kNumAxes; ++ax) out.axes[ax] = a.s[l.comm(static_cast<Axis>(ax))];
  return out;
}

int64_t predict_comm_buffer_bytes(const RunConfig& config, int world_size, int pp_stage, const PipelineStages* stages) {
  const RunConfig resolved = config.resolved(world_size);
  const Layout l = make_layout(resolved, pp_stage, stages);
  const int64_t element = static_cast<int64_t>(dtype_size(config.reduce_dtype));
  int64_t peak = 0;
  // ZeRO-1 and stage 2: a bucket's (group's) packed gradients, then its updated rows
  // gathered (this rank's rows and every rank's).
  if (config.zero_stage == 1) {
    for (const Bucket& b : gradient_buckets(l)) {
      int64_t segment = 0;
      for (size_t p = b.first; p < b.end; ++p) segment += l.padded_numel(l.params()[p]);
      const int n = l.size(l.shard_axis(b.expert));
      peak = std::max({peak, n * segment * element, (1 + n) * segment * kF32});
    }
  }
  if (config.zero_stage >= 2) {
    // Per group and shard group: the reduce-scatter's send and receive buffers, and the
    // gather's (this rank's shards and every rank's). Stage 3 gathers the next unit's
    // group while the current one's buffers are still held (prefetch); in backward, a
    // group's reduce-scatter has just started when the next two groups' gathers are held.
    std::vector<int64_t> gather(static_cast<size_t>(l.units - 1), 0), reduce(gather.size(), 0);
    for (const LocalParam& p : l.params()) {
      const size_t g = p.unit == 0 || p.unit == l.units - 1 ? 0 : static_cast<size_t>(p.unit);
      const int n = l.size(l.shard_axis(p.expert));
      gather[g] += (1 + n) * l.padded_numel(p) * kF32;
      reduce[g] += n * l.padded_numel(p) * element + l.padded_numel(p) * element;
    }
    for (size_t g = 0; g < gather.size(); ++g) peak = std::max({peak, gather[g], reduce[g]});
    if (config.zero_stage == 3 && config.prefetch) {
      for (size_t g = 1; g + 1 < gather.size(); ++g) peak = std::max(peak, gather[g] + gather[g + 1]);
      for (size_t g = 3; g < gather.size(); ++g) peak = std::max(peak, reduce[g] + gather[g - 1] + gather[g - 2]);
    }
  }
  // Expert parallelism: one exchange's scratch of the expert-side rows (balanced routing).
  if (l.ep > 1) {
    bool moe_here = false;
    for (int layer = 0; layer < config.model.n_layer; ++layer) moe_here |= config.model.is_moe_block(layer) && l.local(1 + layer);
    if (moe_here) peak = std::max(peak, routed_row_bytes(l));
  }
  // Pipeline: a copy of every input gradient sent, kept to the end of the schedule.
  if (l.pp > 1) {
    int64_t sent = 0;
    for (int chunk = l.stage; chunk < l.pp_chunks; chunk += l.pp) sent += chunk > 0 ? l.m : 0;
    peak += sent * l.Nl * l.C * kF32;
  }
  return peak;
}

}  // namespace ndt
