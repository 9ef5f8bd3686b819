#include "train/training_model.h"

#include "core/error.h"
#include "optim/weight_decay.h"
#include "parallel/full_parameters.h"
#include "parallel/pipeline/stages.h"
#include "train/agreed_error.h"

#include <fmt/format.h>

namespace ndt {

ParallelOptions parallel_options(const RunConfig& config, std::vector<char> local_units) {
  ParallelOptions o;
  o.zero_stage = config.zero_stage;
  o.bucket_bytes = static_cast<size_t>(config.bucket_mb * 1024 * 1024);
  o.reshard_after_forward = config.reshard_after_forward;
  o.prefetch = config.prefetch;
  o.sequence_parallel = config.sequence_parallel;
  o.cp_mode = config.cp_mode;
  o.cp_chunks = config.cp_chunks;
  o.adamw = config.adamw;
  o.reduce_dtype = config.reduce_dtype;
  o.dp_reduction = config.dp_reduction;
  o.local_units = std::move(local_units);
  o.offload.optimizer = config.offload_optimizer;
  o.offload.params = config.offload_params;
  o.offload.dir = config.offload_folder();
  o.offload.chunk_bytes = static_cast<int64_t>(config.offload_chunk_mb * 1024 * 1024);
  o.offload.prefetch = config.offload_prefetch;
  o.offload.backend = config.offload_io;
  return o;
}

std::filesystem::path swap_folder(const RunConfig& config, int world_rank) {
  return std::filesystem::path(config.offload_folder()) / fmt::format("rank-{:05d}", world_rank);
}

TrainingModel::TrainingModel(const RunConfig& config, DeviceMesh& mesh) : config_(config), mesh_(mesh) {
  if (config.offloads()) {  // every rank its own folder and files, locked as the run's folders are
    std::string error;
    try {
      offload::OffloadOptions o = parallel_options(config).offload;
      o.dir = swap_folder(config, mesh.world().rank());
      swap_lock_ = std::make_unique<RunFolderLock>(o.dir, "offload.dir");
      swap_ = std::make_unique<offload::SwapSpace>(o);
    } catch (const Error& e) {
      error = e.what();
    }
    throw_if_any_rank_failed(mesh, error);
  }
  // Built without parameter memory: parallelize() places the parameters first.
  model_ = std::make_unique<Transformer>(config.model, config.seed, config.loss_chunk_rows,
                                         /*materialize_parameters=*/false);
  apply_weight_decay_policy(model_->store(), config.weight_decay_policy);
  model_->set_activation_checkpointing(config.activation_checkpointing);
  model_->set_precision(config.precision);
  model_->set_z_loss(config.z_loss);
  if (config.document_boundaries) {
    NDT_CHECK(config.document_separator >= 0,
              "data.document_boundaries = true needs the token that starts a document: data.document_separator = {} "
              "(the trainer fills it from the shards' record; a model built without the data must be given it)",
              config.document_separator);
    model_->set_document_separator(config.document_separator);
  }
  const int pp = mesh.size(Axis::pp);
  if (pp == 1) {
    sync_ = parallelize(*model_, mesh, parallel_options(config), swap_.get());
  } else {
    PipelineStages stages = partition_pipeline(config.model, config.seq_len, pp * config.pp_virtual_stages,
                                               parse_pipeline_layers(config.pp_layers));
    const PipelineShape shape =
        pipeline_shape(config.pp_schedule, pp, config.pp_virtual_stages, config.micro_batches(), config.pp_seq_chunks);
    sync_ = parallelize(*model_, mesh, parallel_options(config, stages.local_units(mesh.coord(Axis::pp), shape)),
                        swap_.get());
    pipeline_ = std::make_unique<PipelineRunner>(*model_, mesh.axis(Axis::pp), config.pp_schedule, shape,
                                                 std::move(stages), sync_.get());
    if (config.model.tied_embeddings) tied_ = std::make_unique<TiedEmbedding>(mesh.axis(Axis::pp), shape);
  }
  const size_t rows = static_cast<size_t>(config.micro_batch_size) * config.seq_len;
  inputs_.resize(rows);
  targets_.resize(rows);
}

void TrainingModel::prepare(MicroBatchContext& ctx, int micro_batch, const FetchRows& fetch, float grad_scale,
                            bool forward_only) {
  const int micro = config_.micro_batch_size;
  fetch(mesh_.coord(Axis::dp) * config_.rows_per_rank() + micro_batch * micro, micro, inputs_.data(),
        targets_.data());
  model_->prepare(ctx, inputs_.data(), targets_.data(), micro, config_.seq_len, grad_scale, forward_only);
}

MicroBatchLosses TrainingModel::compute_gradients(const FetchRows& fetch, float grad_scale, bool reduce) {
  model_->store().refresh_compute();  // the last step (or a load) changed the values
  if (Fp8Linears* fp8 = model_->fp8()) fp8->begin_step();
  sync_->zero_grads();
  if (pipeline_) return run_pipeline(fetch, grad_scale, /*forward_only=*/false);
  MicroBatchLosses losses;
  const int accum = config_.micro_batches();
  for (int m = 0; m < accum; ++m) {
    sync_->begin_backward(/*sync=*/reduce && m == accum - 1);
    prepare(ctx_, m, fetch, grad_scale, /*forward_only=*/false);
    losses.loss += run_forward_backward(*model_, ctx_, sync_.get());
    losses.z_loss += ctx_.z_loss_sum / static_cast<double>(ctx_.rows());
    losses.loss_sum += ctx_.loss_sum, losses.z_loss_sum += ctx_.z_loss_sum;
    sync_->finish_backward();
  }
  return losses;
}

MicroBatchLosses TrainingModel::run_pipeline(const FetchRows& fetch, float grad_scale, bool forward_only) {
  auto prepare_micro_batch = [&](int mb, MicroBatchContext& ctx, bool only_forward) {
    prepare(ctx, mb, fetch, grad_scale, only_forward);
  };
  PipelineLosses sums;
  if (forward_only) {
    sums = pipeline_->evaluate(config_.micro_batches(), prepare_micro_batch);
  } else {
    // Gradients accumulate over the whole schedule (ZeRO-2/3 reduce-scatter each
    // group's after its backward, micro-batch by micro-batch); the data-parallel sync
    // follows it. A tied embedding's two copies are then summed in whatever form the
    // sync left them (whole, or this rank's shard: the two stages shard it alike).
    sync_->begin_backward(/*sync=*/false);
    sums = pipeline_->train(prepare_micro_batch);
    sync_->begin_backward(/*sync=*/true);
    sync_->finish_backward();
    if (tied_) tied_->sum_gradients(model_->store(), *sync_);
  }
  // Per token this rank holds of a micro-batch: a sum of the micro-batches' means.
  const double tokens = static_cast<double>(config_.micro_batch_size) * (config_.seq_len / mesh_.size(Axis::cp));
  return {sums.loss_sum / tokens, sums.z_loss_sum / tokens, sums.loss_sum, sums.z_loss_sum};
}

MicroBatchLosses TrainingModel::evaluate(const FetchRows& fetch) {
  model_->store().refresh_compute();
  if (pipeline_) return run_pipeline(fetch, 0.0f, /*forward_only=*/true);
  MicroBatchLosses losses;
  for (int m = 0; m < config_.micro_batches(); ++m) {
    prepare(ctx_, m, fetch, 0.0f, /*forward_only=*/true);
    losses.loss += run_forward(*model_, ctx_, sync_.get());
    losses.z_loss += ctx_.z_loss_sum / static_cast<double>(ctx_.rows());
    losses.loss_sum += ctx_.loss_sum, losses.z_loss_sum += ctx_.z_loss_sum;
  }
  return losses;
}

std::vector<float> TrainingModel::full_parameters() {
  return gather_full_parameters(model_->store(), *sync_, mesh_);
}

}  // namespace ndt
