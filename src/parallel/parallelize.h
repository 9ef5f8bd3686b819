// parallelize(): applies a layout to a model from outside, in the spirit of
// torchtitan's parallelize functions. The model declares its units and parameters
// (with what tensor parallelism would do to each) and knows nothing of meshes; this
// one function, called by the trainer and the benchmarks alike:
//   1. writes every parameter's placements (Shard(dim) on tp for Megatron layers,
//      Shard(0) on dp_shard under FSDP, Shard(0) on ep for routed experts and then
//      Shard(0) on edp_shard under FSDP) and the axes
//      its gradient is Partial over (tp for replicated parameters that each tp rank sees
//      in part; the data-parallel axes for every parameter, edp instead for the experts
//      under expert parallelism), the one description that gradient reduction, the
//      norm, checkpoints and the memory model read;
//   2. keeps each rank's tp block of every parameter sharded on tp and installs the
//      Megatron region operators (sequence parallel or not) into the model's units, and
//      under context parallelism ring attention, Ulysses or USP into its blocks (parameters
//      replicated over cp, gradients Partial on cp: reduced and sharded over dp x cp);
//      under expert parallelism (mesh ep > 1) keeps each rank's ep block of the routed
//      experts and installs the all-to-all dispatch (parallel/expert/expert_parallel.h);
//   3. materialises the parameters (FSDP initialises its own shards instead) and builds
//      the data-parallel strategy: DDP, ZeRO stage 1, or FSDP (stages 2 and 3) with each
//      block its own group and the embedding with the head as the root group.
// A new axis plugs in here: it adds its placements and installs its strategy into the
// units it changes.
#pragma once

#include "comm/device_mesh.h"
#include "model/transformer.h"
#include "offload/swap_space.h"
#include "optim/adamw.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/data/two_level_reduce.h"

#include <cstddef>
#include <memory>

namespace ndt {

struct ParallelOptions {
  int zero_stage = 0;  // 0: DDP, 1: ZeRO-1, 2: ZeRO-2, 3: FSDP
  size_t bucket_bytes = 25u << 20;
  bool reshard_after_forward = true;
  bool prefetch = true;
  bool sequence_parallel = false;
  // Context parallelism (mesh cp > 1): ring attention, Ulysses or USP (over the mesh's
  // cp_ulysses x cp_ring), and how each sequence is cut (model/activation_layout.h).
  CpMode cp_mode = CpMode::ring;
  CpChunks cp_chunks = CpChunks::zigzag;
  AdamWConfig adamw;
  // What data-parallel gradient reductions send (precision.reduce_dtype): f32, or bf16
  // (half the bytes; parallel/data/low_precision_comm.h).
  DType reduce_dtype = DType::f32;
  // DDP's all-reduce when the data-parallel group crosses nodes (parallel/data/two_level_reduce.h).
  DpReduction dp_reduction = DpReduction::automatic;
  // Pipeline parallelism (mesh pp > 1): the units this rank runs, one flag per unit
  // (parallel/pipeline/stages.h). Only their parameters exist here, plus a tied
  // embedding on the stage holding the head (a pipeline copy). Empty: every unit.
  std::vector<char> local_units;
  // Offload (docs/offload.md): the optimizer states, and with FSDP the parameter and
  // gradient shards, in swap files in offload.dir (this rank's folder, which the caller
  // creates and locks). Needs zero_stage >= 1 (parameters: 3).
  offload::OffloadOptions offload;
};

// A one-rank job passes a one-rank mesh (DeviceMesh()). The model must be built without
// materialising its parameters when the mesh has tp > 1 (its blocks change). The
// returned strategy is also installed as the model's hooks (Transformer::set_hooks);
// it must outlive the model's use. Set the model's precision first: FSDP gathers the
// matmul-only weights in its compute dtype. With options.offload active, `swap` is the
// rank's swap space (offload/swap_space.h), which must outlive the strategy.
std::unique_ptr<GradientSync> parallelize(Transformer& model, DeviceMesh& mesh, const ParallelOptions& options,
                                          offload::SwapSpace* swap = nullptr);

}  // namespace ndt
