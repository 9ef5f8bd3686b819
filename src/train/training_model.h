// The model a run trains, built for its mesh in one place: the trainer, the benchmarks
// and the tests all build it here, so the order of construction (the model without
// parameter memory, its policies, parallelize(), the pipeline runner and the tied
// embedding) is written once. It also runs the layout-independent half of a step:
// forward and backward of this rank's rows of a batch, micro-batch by micro-batch or in
// the pipeline schedule's order, with the data-parallel gradient reduction; what the
// step then does with the gradients (the norm, the stability decisions, the update) is
// the trainer's (train/trainer.h) or a benchmark's.
#pragma once

#include "comm/device_mesh.h"
#include "model/transformer.h"
#include "offload/swap_space.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline/runner.h"
#include "parallel/pipeline/tied_embedding.h"
#include "train/config.h"
#include "train/run_lock.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace ndt {

// The parallelize() options of a run's layout: the one mapping from config keys to them.
// local_units: this pp rank's units (empty: every unit, pp = 1). The offload options'
// dir is the run's swap folder; each rank's own is swap_folder() in it.
ParallelOptions parallel_options(const RunConfig& config, std::vector<char> local_units = {});
// This rank's swap folder: <offload folder>/rank-NNNNN (world rank).
std::filesystem::path swap_folder(const RunConfig& config, int world_rank);

// Fills the inputs and targets [rows x T] of rows [row_begin, row_begin + rows) of the
// global batch being computed.
using FetchRows = std::function<void(int row_begin, int rows, int32_t* inputs, int32_t* targets)>;

// Sums over this rank's micro-batches of each micro-batch's mean token loss: the
// cross-entropy and the z-loss term (0 without optim.z_loss); and the plain sums of the
// token losses (a loss-masked target adds 0), which data.loss_mask divides by the global
// count. Under pipeline parallelism every pp rank has them (the runner shares them).
struct MicroBatchLosses {
  double loss = 0;
  double z_loss = 0;
  double loss_sum = 0;
  double z_loss_sum = 0;
};

class TrainingModel {
 public:
  // config: resolved for the mesh (RunConfig::resolved). Collective over the mesh. With
  // offload on, each rank locks its swap folder (train/run_lock.h: the files are the
  // run's own) and opens its swap space there.
  TrainingModel(const RunConfig& config, DeviceMesh& mesh);

  Transformer& model() { return *model_; }
  const Transformer& model() const { return *model_; }
  GradientSync& sync() { return *sync_; }
  const GradientSync& sync() const { return *sync_; }
  PipelineRunner* pipeline() { return pipeline_.get(); }  // null without pp
  const PipelineRunner* pipeline() const { return pipeline_.get(); }

  // One step's gradients: refreshes the compute copies, zeroes the gradients, runs this
  // rank's micro-batches of the batch `fetch` gives, backward computing the gradient of
  // grad_scale x the token losses, reduces them over data parallelism (reduce = false:
  // accumulated locally only, no_sync) and sums a tied embedding's over pp.
  MicroBatchLosses compute_gradients(const FetchRows& fetch, float grad_scale, bool reduce = true);
  // Forward passes only, over this rank's micro-batches of the batch `fetch` gives.
  MicroBatchLosses evaluate(const FetchRows& fetch);
  // Frees the training context (before sampling, so the activation peak stays the
  // training one).
  void release_context() { ctx_ = MicroBatchContext(); }

  // Every parameter's whole value, in store order (parallel/full_parameters.h). Collective.
  std::vector<float> full_parameters();

 private:
  MicroBatchLosses run_pipeline(const FetchRows& fetch, float grad_scale, bool forward_only);
  void prepare(MicroBatchContext& ctx, int micro_batch, const FetchRows& fetch, float grad_scale, bool forward_only);

  RunConfig config_;
  DeviceMesh& mesh_;
  std::unique_ptr<RunFolderLock> swap_lock_;  // offload: this rank's swap folder, held first, released last
  std::unique_ptr<offload::SwapSpace> swap_;  // outlives the strategy's swap files
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<PipelineRunner> pipeline_;
  std::unique_ptr<TiedEmbedding> tied_;  // pp > 1 with a tied embedding
  std::vector<int32_t> inputs_, targets_;
  MicroBatchContext ctx_;  // the micro-batch in flight (pp = 1)
};

}  // namespace ndt
