#include "train/checkpointing.h"

#include "checkpoint/commit.h"
#include "checkpoint/directory.h"
#include "checkpoint/reader.h"
#include "core/error.h"
#include "core/timing.h"
#include "interchange/model_state.h"
#include "train/agreed_error.h"
#include "train/model_checkpoint.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>

namespace ndt {

namespace {


// Rows a slice on disk is read or written in at a time (bounded memory for offload).
constexpr int64_t kPieceElements = int64_t{1} << 22;

// "parameter NAME (its value | AdamW moment) holds NaN at element I", for the first
// non-finite number among the state this rank holds; empty when all are finite. A slice
// on disk (offload) is read piece by piece.
std::string first_non_finite(const std::vector<StateSlice>& slices) {
  std::vector<float> piece;
  for (const StateSlice& s : slices) {
    const int64_t n = s.numel();
    for (int64_t first = 0; first < n; first += kPieceElements) {
      const int64_t count = std::min(kPieceElements, n - first);
      const float* values = s.data + first;
      if (s.on_disk()) {
        piece.resize(static_cast<size_t>(count));
        s.read(first, count, piece.data());
        values = piece.data();
      }
      for (int64_t i = 0; i < count; ++i) {
        if (!std::isfinite(values[i])) {
          return fmt::format("{} holds {} at element {} of its rows [{}, {})", s.tensor_name(), values[i], first + i,
                             s.row_begin, s.row_end);
        }
      }
    }
  }
  return "";
}

// Reads slice s from the checkpoint into `out` (in memory), or, for a slice on disk,
// piece by piece (whole rows) into its swap file's restore copy.
void read_slice(ckpt::CheckpointReader& reader, const StateSlice& s, std::vector<float>& out) {
  const Shape shape = s.shape();
  if (!s.on_disk()) {
    out.resize(static_cast<size_t>(shape_numel(shape)));
    reader.read_block(s.tensor_name(), s.param->spec.logical_shape, s.offset(), shape, out.data());
    return;
  }
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t row_numel = rows == 0 ? 0 : shape_numel(shape) / rows;
  const int64_t rows_per_piece = std::max<int64_t>(1, kPieceElements / std::max<int64_t>(1, row_numel));
  std::vector<float> piece;
  for (int64_t r = 0; r < rows; r += rows_per_piece) {
    Shape offset = s.offset(), box = shape;
    const int64_t n = std::min(rows_per_piece, rows - r);
    if (!box.empty()) offset[0] += r, box[0] = n;
    piece.resize(static_cast<size_t>(shape_numel(box)));
    reader.read_block(s.tensor_name(), s.param->spec.logical_shape, offset, box, piece.data());
    s.write(r * row_numel, static_cast<int64_t>(piece.size()), piece.data());
  }
}

// The swap files some slices live in, each once.
std::vector<offload::SwapFile*> swap_files(const std::vector<StateSlice>& slices) {
  std::vector<offload::SwapFile*> files;
  for (const StateSlice& s : slices) {
    if (s.on_disk() && std::find(files.begin(), files.end(), s.swap) == files.end()) files.push_back(s.swap);
  }
  return files;
}

}  // namespace


TrainingCheckpoints::TrainingCheckpoints(const RunConfig& config, DeviceMesh& mesh, std::ostream* log)
    : keep_last_(config.keep_last), mesh_(mesh), log_(log) {
  if (!config.checkpoint_dir.empty()) {
    root_ = config.checkpoint_dir;
  } else if (!config.out_dir.empty()) {
    root_ = std::filesystem::path(config.out_dir) / "checkpoints";
  }
}

TrainingCheckpoints::~TrainingCheckpoints() {
  // An exception is unwinding (or finish() was not called): let the writer end, but
  // commit nothing; the previous checkpoint stays the latest.
  try {
    saver_.wait();
  } catch (const std::exception&) {
  }
}

namespace {

std::string list_steps(const std::vector<int64_t>& steps) {
  std::string names;
  for (int64_t step : steps) names += (names.empty() ? "" : ", ") + ckpt::checkpoint_dir_name(step);
  return names;
}

}  // namespace

void TrainingCheckpoints::claim(std::optional<int64_t> resumed_step, bool overwrite) {
  if (!enabled()) return;
  std::string error;
  if (rank() == 0) {
    try {
      std::vector<int64_t> doomed = ckpt::committed_steps(root_);
      if (resumed_step) std::erase_if(doomed, [&](int64_t step) { return step <= *resumed_step; });
      if (!doomed.empty() && !overwrite) {
        if (resumed_step) {
          fail("{} holds checkpoints newer than the resumed step {} ({}), which this run's saves would replace: "
               "resume from the newest (--resume latest), or pass --overwrite (checkpoint.overwrite = true) to "
               "delete them",
               root_.string(), *resumed_step, list_steps(doomed));
        }
        fail("{} holds {} checkpoint{} of an earlier run ({}): continue it with --resume (checkpoint.resume = "
             "\"latest\"), or start over with --overwrite (checkpoint.overwrite = true), which deletes them",
             root_.string(), doomed.size(), doomed.size() == 1 ? "" : "s", list_steps(doomed));
      }
      const int removed = ckpt::remove_checkpoints_after(root_, resumed_step.value_or(-1));
      if (removed > 0 && log_) {
        fmt::print(*log_, "checkpoint: deleted {} checkpoint{} from {} (checkpoint.overwrite): {}\n", removed,
                   removed == 1 ? "" : "s", root_.string(), list_steps(doomed));
      }
    } catch (const Error& e) {
      error = e.what();
    }
  }
  throw_if_any_rank_failed(mesh_, error);
}

void TrainingCheckpoints::save(int64_t step, GradientSync& sync, const nlohmann::json& state, bool async) {
  if (!enabled()) return;
  const auto t0 = std::chrono::steady_clock::now();
  finish();  // at most one save in flight
  const std::vector<StateSlice> slices = sync.state_slices();
  std::string error = first_non_finite(slices);
  if (!error.empty()) {
    error = fmt::format("the checkpoint of step {} was not written: {}; {}", step, error,
                        last_saved_step_ ? fmt::format("the last one saved is step {}", *last_saved_step_)
                                         : std::string("no earlier checkpoint of this run was saved"));
  } else if (rank() == 0) {
    try {
      ckpt::make_tmp_checkpoint_dir(root_, step);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  throw_if_any_rank_failed(mesh_, error);  // also the barrier before the writes
  // The previous save's buffers are refilled: the same slices, so no allocation. A slice
  // on disk (offload) is not copied: the writer streams it from its swap file, so that
  // save is written at once (training must not change the file while it is read).
  std::vector<ckpt::TensorBlock> snapshot = saver_.take_snapshot();
  size_t i = 0;
  for (const StateSlice& s : slices) {
    if (!s.saved) continue;
    if (i == snapshot.size()) snapshot.emplace_back();
    ckpt::TensorBlock& block = snapshot[i++];
    block.name = s.tensor_name();
    block.logical_shape = s.param->spec.logical_shape;
    block.offset = s.offset();
    block.shape = s.shape();
    if (s.on_disk()) {
      block.data.clear();
      block.source = [s](int64_t first, int64_t count, float* out) { s.read(first, count, out); };
      async = false;
    } else {
      block.data.assign(s.data, s.data + shape_numel(block.shape));
      block.source = nullptr;
    }
  }
  snapshot.resize(i);
  in_flight_tmp_ = root_ / (ckpt::checkpoint_dir_name(step) + ".tmp");
  in_flight_state_ = state;
  in_flight_step_ = step;
  last_saved_step_ = step;
  if (async) {
    saver_.start(in_flight_tmp_, rank(), std::move(snapshot));
  } else {
    saver_.start(in_flight_tmp_, rank(), std::move(snapshot));  // the same write, waited for at once
    finish();
  }
  blocked_seconds_ += seconds_since(t0);
}

StepBoundary TrainingCheckpoints::poll(StepBoundary local) {
  // One all-reduce for every question: does any rank want to stop (which signal), has
  // any failed to write metrics, is any still writing the save in flight.
  int32_t flags[3] = {local.stop_signal, local.metrics_failed ? 1 : 0, in_flight_step_ && !saver_.done() ? 1 : 0};
  if (mesh_.world().size() > 1) mesh_.world().all_reduce(flags, 3, DType::i32, ReduceOp::max);
  if (in_flight_step_ && flags[2] == 0) commit();
  return {flags[0], flags[1] != 0};
}

void TrainingCheckpoints::finish() {
  if (!in_flight_step_) return;
  const auto t0 = std::chrono::steady_clock::now();
  saver_.wait();
  mesh_.world().barrier();
  blocked_seconds_ += seconds_since(t0);
  commit();
}

void TrainingCheckpoints::commit() {
  saver_.wait();  // done already: rethrows a write error on this rank
  const std::filesystem::path final_dir = root_ / ckpt::checkpoint_dir_name(*in_flight_step_);
  // Rank 0 commits; every rank returns once it is committed (or throws if it failed).
  std::string error;
  if (rank() == 0) {
    try {
      ckpt::commit_checkpoint(in_flight_tmp_, final_dir, world_size(), in_flight_state_);
      ckpt::prune_checkpoints(root_, keep_last_);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  const int64_t step = *in_flight_step_;
  in_flight_step_.reset();
  throw_if_any_rank_failed(mesh_, error.empty() ? "" : fmt::format("checkpoint of step {}: {}", step, error));
  if (rank() == 0 && log_) {
    const ckpt::WriteStats& w = saver_.last_stats();
    fmt::print(*log_, "checkpoint: step {} saved to {} (rank 0 wrote {:.1f} MB in {:.2f} s, {:.0f} MB/s)\n", step,
               final_dir.string(), w.bytes / 1e6, w.seconds, w.seconds > 0 ? w.bytes / 1e6 / w.seconds : 0.0);
  }
}

std::filesystem::path resolve_resume(const std::string& resume, const std::filesystem::path& root) {
  if (resume != "latest") return resolve_checkpoint(resume);
  NDT_CHECK(!root.empty(), "checkpoint.resume = \"latest\" needs checkpoint.dir or runtime.out_dir");
  const std::optional<std::filesystem::path> latest = ckpt::latest_checkpoint(root);
  NDT_CHECK(latest.has_value(), "checkpoint.resume = \"latest\": no committed checkpoint under {}", root.string());
  return *latest;
}

nlohmann::json training_state(const RunConfig& config, int64_t step, const GradientSync& sync, const DeviceMesh& mesh) {
  return {{"kind", "training"},
          {"step", step},
          {"optimizer_steps", sync.optimizer_steps()},
          {"seed", config.seed},
          // The loader, the schedule and the RNG keep no state beyond these: a batch is a
          // function of (seed, step), a learning rate of the step, a random draw of
          // (seed, stream, index).
          // document_separator: the token documents start at under data.document_boundaries
          // (-1: off), which `ndtrain generate` applies too.
          {"data",
           {{"train", config.train_data},
            {"seed", config.seed},
            {"next_step", step},
            {"document_separator", config.document_boundaries ? config.document_separator : -1}}},
          {"schedule",
           {{"max_lr", config.schedule.max_lr},
            {"min_lr_ratio", config.schedule.min_lr_ratio},
            {"warmup_steps", config.schedule.warmup_steps},
            {"decay_steps", config.schedule.decay_steps},
            {"next_lr", config.schedule.at(step)}}},
          {"rng", {{"generator", "philox-4x32 (counter-based)"}, {"seed", config.seed}}},
          {"model", config_fields(config.model)},
          {"mesh", mesh.shape().product() == 1 ? std::string("one rank") : mesh.shape().str()},
          {"config", describe_run_config(config)}};
}

namespace {

// What the state JSON says must agree with itself and with the folder's name: a step
// edited in one place only would resume at the wrong batch and learning rate.
void check_state_consistency(const std::filesystem::path& dir, const nlohmann::json& state) {
  const int64_t step = state.at("step").get<int64_t>();
  const int64_t data_step = state.at("data").at("next_step").get<int64_t>();
  const int64_t optimizer_steps = state.at("optimizer_steps").get<int64_t>();
  NDT_CHECK(step >= 0 && data_step == step,
            "checkpoint {} is inconsistent: step {} but the data loader's next step {}", dir.string(), step, data_step);
  NDT_CHECK(optimizer_steps >= 0 && optimizer_steps <= step,
            "checkpoint {} is inconsistent: {} optimizer steps after {} training steps", dir.string(), optimizer_steps,
            step);
  const std::string name = dir.filename().string();
  NDT_CHECK(!name.starts_with("step-") || name == ckpt::checkpoint_dir_name(step),
            "checkpoint {} is inconsistent: its folder is named {} but it holds step {}", dir.string(), name, step);
}

}  // namespace

nlohmann::json load_training_checkpoint(const std::filesystem::path& dir, GradientSync& sync, const RunConfig& config,
                                        DeviceMesh& mesh) {
  // Read and check everything first; apply only if every rank read all of its slices.
  std::vector<StateSlice> slices = sync.state_slices();
  std::vector<std::vector<float>> buffers(slices.size());
  const std::vector<offload::SwapFile*> swaps = swap_files(slices);  // restored beside, put in place at the end
  nlohmann::json state;
  std::string error;
  try {
    for (offload::SwapFile* f : swaps) f->begin_restore();
    ckpt::CheckpointReader reader(dir);
    state = reader.state();
    NDT_CHECK(state.value("kind", "") == "training",
              "checkpoint {} holds a model only (kind \"{}\"), no optimizer state to resume from (start from its "
              "weights with train.init_from)",
              dir.string(), state.value("kind", ""));
    check_state_consistency(dir, state);
    const std::string differences = config_differences(saved_model_config(reader, dir), config.model, "in the checkpoint");
    NDT_CHECK(differences.empty(), "checkpoint {} does not match the model{}", dir.string(), differences);
    for (size_t i = 0; i < slices.size(); ++i) read_slice(reader, slices[i], buffers[i]);
  } catch (const Error& e) {
    error = std::string(e.what()) + "; nothing was loaded";
  } catch (const nlohmann::json::exception& e) {
    error = fmt::format("checkpoint {}: its state is malformed ({}); nothing was loaded", dir.string(), e.what());
  }
  if (!error.empty()) {
    for (offload::SwapFile* f : swaps) f->abort_restore();
  }
  throw_if_any_rank_failed(mesh, error);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (!slices[i].on_disk()) std::memcpy(slices[i].data, buffers[i].data(), buffers[i].size() * sizeof(float));
  }
  for (offload::SwapFile* f : swaps) f->commit_restore();
  sync.set_optimizer_steps(state.at("optimizer_steps").get<int64_t>());
  return state;
}

}  // namespace ndt
