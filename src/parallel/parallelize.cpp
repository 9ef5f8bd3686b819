#include "parallel/parallelize.h"

#include "core/error.h"
#include "parallel/data/data_parallel.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/data/fsdp.h"
#include "parallel/context/ring_attention.h"
#include "parallel/context/ulysses_attention.h"
#include "parallel/context/usp_attention.h"
#include "parallel/tensor/tensor_parallel.h"
#include "parallel/data/zero_stage1.h"

namespace ndt {

namespace {

// Every parameter's placements and the axes its gradient is Partial over.
void place_parameters(ParameterStore& store, const MeshShape& mesh, const ParallelOptions& o) {
  for (Parameter& p : store.params()) {
    p.placements.clear();
    p.grad_partial.clear();
    if (const auto tp = tensor_parallel_placement(p.spec, mesh.tp)) p.placements.push_back(*tp);
    if (tensor_parallel_grad_partial(p.spec, mesh.tp, o.sequence_parallel)) p.grad_partial.push_back(Axis::tp);
    if (p.spec.expert && mesh.ep > 1) {
      // Each ep rank holds E / ep experts whole and receives every row routed to them
      // from its ep group: their gradient is a part of the sum over the groups, edp.
      // FSDP shards its experts further along dim 0 over the ranks holding the same
      // experts within a replica, edp_shard.
      NDT_CHECK(p.spec.tp_dim != 0, "parameter {} declares tp_dim 0, its experts, which ep splits (an expert "
                "weight splits over tp on dim 1 or 2)", p.name());
      p.placements.push_back(Placement{Axis::ep, Placement::Kind::shard, 0});
      if (o.zero_stage == 3) p.placements.push_back(Placement{Axis::edp_shard, Placement::Kind::shard, 0});
      if (mesh.size(Axis::edp) > 1) p.grad_partial.push_back(Axis::edp);
      continue;
    }
    // FSDP shards the tensor-parallel block (if any) further along its dim 0, over the
    // context-parallel ranks too (they hold the same parameters).
    const Axis shard_axis = mesh.cp > 1 ? Axis::dp_shard_cp : Axis::dp_shard;
    if (o.zero_stage == 3) p.placements.push_back(Placement{shard_axis, Placement::Kind::shard, 0});
    // Each data-parallel rank computes the gradient of its part of the batch, each
    // context-parallel rank that of its part of every sequence.
    if (mesh.dp_replicate > 1) p.grad_partial.push_back(Axis::dp_replicate);
    if (mesh.dp_shard > 1) p.grad_partial.push_back(Axis::dp_shard);
    if (mesh.cp > 1) p.grad_partial.push_back(Axis::cp);
  }
}

// torchtitan's wrapping: each block its own group, then the rest (the embedding and
// the head, which a tied output layer shares) as the root group, first.
std::vector<FsdpGroup> fsdp_groups(int units, bool reshard_after_forward) {
  std::vector<FsdpGroup> groups = {{{0, units - 1}, false}};
  for (int u = 1; u < units - 1; ++u) groups.push_back({{u}, reshard_after_forward});
  return groups;
}

// What parallelize refuses before it changes the model.
void check_parallel_options(const Transformer& model, const MeshShape& shape, const ParallelOptions& o,
                            const offload::SwapSpace* swap) {
  NDT_CHECK(o.zero_stage >= 0 && o.zero_stage <= 3, "parallel.zero_stage = {} must be 0, 1, 2 or 3", o.zero_stage);
  NDT_CHECK(!o.offload.active() || swap != nullptr, "parallelize: offload needs the rank's swap space");
  NDT_CHECK(!o.offload.active() || o.zero_stage >= 1,
            "offload.optimizer = \"disk\" needs parallel.zero_stage >= 1 (each rank offloads its shard of the "
            "optimizer state; on one rank ZeRO-1 shards nothing and trains as DDP)");
  NDT_CHECK(!o.offload.params || o.zero_stage == 3, "offload.params = \"disk\" needs parallel.zero_stage = 3 (FSDP), "
            "not {}", o.zero_stage);
  validate_tensor_parallel(model.config(), shape.tp, false, 1);
  if (shape.cp > 1) validate_cp_ulysses(shape.cp, o.cp_mode, shape.cp_ulysses);
  if (shape.cp > 1 && o.cp_mode != CpMode::ring) {
    validate_head_split(model.config().n_head / shape.tp, model.config().kv_heads() / shape.tp, o.cp_mode,
                        o.cp_mode == CpMode::usp ? shape.cp_ulysses : shape.cp);
  }
  if (shape.ep > 1) validate_expert_parallel(model.config(), shape.ep);
  if (shape.pp > 1) {
    NDT_CHECK(static_cast<int>(o.local_units.size()) == model.num_units(),
              "parallelize: parallel.pp = {} needs this rank's units", shape.pp);
  }
}

// Keeps this rank's pipeline stage (and a tied head's copy of the embedding), its tp and
// ep slices of the blocks, and gives attention its share of the cp split.
void split_over_axes(Transformer& model, DeviceMesh& mesh, const ParallelOptions& o, const TensorParallel& tp) {
  const MeshShape& shape = mesh.shape();
  ParameterStore& store = model.store();
  if (shape.pp > 1) model.set_local_units(o.local_units);
  if (tp.active()) {
    NDT_CHECK(!store.values().defined(),
              "parallelize: parallel.tp = {} needs the model built without materialising its parameters", tp.size());
    store.split_blocks(Axis::tp, tp.rank(), tp.size());
    model.set_tensor_parallel(std::make_unique<MegatronRegions>(tp));
  }
  if (shape.ep > 1) {
    NDT_CHECK(!store.values().defined(),
              "parallelize: parallel.ep = {} needs the model built without materialising its parameters", shape.ep);
    store.split_blocks(Axis::ep, mesh.coord(Axis::ep), shape.ep);
    model.set_expert_dispatch(std::make_unique<ExpertParallel>(mesh.axis(Axis::ep)));
  }
  if (shape.pp > 1) {
    NDT_CHECK(!store.values().defined(),
              "parallelize: parallel.pp = {} needs the model built without materialising its parameters", shape.pp);
    // A tied output layer is the embedding table: the stage holding the head keeps a copy.
    const bool head_here = model.holds_head();
    for (Parameter& p : store.params()) {
      p.pipeline_copy = head_here && model.config().tied_embeddings && p.name() == "wte.weight" &&
                        !o.local_units[static_cast<size_t>(p.unit())];
    }
    store.keep_only([&](const Parameter& p) { return o.local_units[static_cast<size_t>(p.unit())] || p.pipeline_copy; });
  }
  if (shape.cp > 1) {
    const CpLayout layout{shape.cp, o.cp_mode, o.cp_chunks, shape.cp_ulysses};
    Communicator& cp = mesh.axis(Axis::cp);
    if (o.cp_mode == CpMode::ring) {
      model.set_context_parallel(std::make_unique<RingAttention>(cp, layout));
    } else if (o.cp_mode == CpMode::ulysses) {
      model.set_context_parallel(std::make_unique<UlyssesAttention>(cp, layout));
    } else {
      model.set_context_parallel(
          std::make_unique<UspAttention>(cp, mesh.axis(Axis::cp_ulysses), mesh.axis(Axis::cp_ring), layout));
    }
  }
}

// The gradient sync of o.zero_stage: DDP, ZeRO-1, or FSDP (stages 2 and 3).
std::unique_ptr<GradientSync> data_parallel_sync(Transformer& model, DeviceMesh& mesh, const ParallelOptions& o,
                                                 offload::SwapSpace* swap) {
  ParameterStore& store = model.store();
  // FSDP gathers the matmul-only weights in the compute dtype: the model reads only
  // their compute copy. fp8 quantises weights from their fp32 values: then fp32.
  const Precision& precision = model.precision();
  const DType gather_dtype = precision.low() && !precision.fp8 ? precision.compute : DType::f32;
  if (o.zero_stage >= 2) {
    return std::make_unique<FullyShardedDataParallel>(store, mesh, o.zero_stage, o.adamw,
                                                      fsdp_groups(model.num_units(), o.reshard_after_forward),
                                                      o.prefetch, o.local_units, o.reduce_dtype, gather_dtype, swap);
  }
  if (o.zero_stage == 1) return std::make_unique<ZeroStage1>(store, mesh, o.bucket_bytes, o.adamw, o.reduce_dtype, swap);
  auto ddp = std::make_unique<DataParallel>(store, mesh.axis(Axis::dp_cp), o.bucket_bytes, o.adamw, o.reduce_dtype,
                                            mesh.axis(Axis::edp));
  if (mesh.nodes_spanned(Axis::dp_cp) > 1) ddp->set_reduction(o.dp_reduction, o.bucket_bytes);
  return ddp;
}

}  // namespace

std::unique_ptr<GradientSync> parallelize(Transformer& model, DeviceMesh& mesh, const ParallelOptions& o,
                                          offload::SwapSpace* swap) {
  const MeshShape& shape = mesh.shape();
  check_parallel_options(model, shape, o, swap);
  if (!o.offload.active()) swap = nullptr;
  const TensorParallel tp{&mesh.axis(Axis::tp), o.sequence_parallel};
  ParameterStore& store = model.store();
  place_parameters(store, shape, o);
  split_over_axes(model, mesh, o, tp);
  // FSDP (stage 3) initialises each rank's shards itself: the whole model never exists on a rank.
  if (o.zero_stage != 3 && !store.values().defined()) store.materialize();
  std::unique_ptr<GradientSync> sync = data_parallel_sync(model, mesh, o, swap);
  sync->set_tensor_parallel(store, tp);
  if (shape.ep > 1) sync->set_expert_parallel(&mesh.axis(Axis::ep));
  if (shape.pp > 1) sync->set_pipeline(store, &mesh.axis(Axis::pp));
  model.set_hooks(sync.get());
  return sync;
}

}  // namespace ndt
