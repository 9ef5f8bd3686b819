#include "train/checkpointing.h"

#include "checkpoint/commit.h"
#include "checkpoint/directory.h"
#include "checkpoint/reader.h"
#include "core/error.h"
#include "core/timing.h"
#include "interchange/model_state.h"
#include "train/model_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>

namespace ndt {

namespace {

std::atomic<bool> g_stop{false};

void on_sigterm(int) { g_stop.store(true); }

// The maximum of a flag over the world (1 if any rank has it).
bool any_rank(DeviceMesh* mesh, bool flag) {
  if (mesh == nullptr || mesh->world().size() == 1) return flag;
  int32_t value = flag ? 1 : 0;
  mesh->world().all_reduce(&value, 1, DType::i32, ReduceOp::max);
  return value != 0;
}

}  // namespace

void install_stop_handler() { std::signal(SIGTERM, on_sigterm); }
bool stop_requested() { return g_stop.load(); }
void clear_stop_request() { g_stop.store(false); }

TrainingCheckpoints::TrainingCheckpoints(const RunConfig& config, DeviceMesh* mesh, std::ostream* log)
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

void TrainingCheckpoints::claim(int64_t step) {
  if (!enabled()) return;
  if (rank() == 0 && std::filesystem::exists(root_)) {
    const int removed = ckpt::remove_checkpoints_after(root_, step);
    if (removed > 0 && log_) {
      fmt::print(*log_, "checkpoint: removed {} checkpoint{} of an earlier run from {} ({})\n", removed,
                 removed == 1 ? "" : "s", root_.string(),
                 step < 0 ? "this run starts afresh; use --resume to continue one" : "they came after the resumed step");
    }
  }
  if (mesh_) mesh_->world().barrier();
}

void TrainingCheckpoints::save(int64_t step, GradientSync& sync, const nlohmann::json& state, bool async) {
  if (!enabled()) return;
  const auto t0 = std::chrono::steady_clock::now();
  finish();  // at most one save in flight
  if (rank() == 0) ckpt::make_tmp_checkpoint_dir(root_, step);
  if (mesh_) mesh_->world().barrier();
  // The previous save's buffers are refilled: the same slices, so no allocation.
  std::vector<ckpt::TensorBlock> snapshot = saver_.take_snapshot();
  size_t i = 0;
  for (const StateSlice& s : sync.state_slices()) {
    if (!s.saved) continue;
    if (i == snapshot.size()) snapshot.emplace_back();
    ckpt::TensorBlock& block = snapshot[i++];
    block.name = s.tensor_name();
    block.logical_shape = s.param->spec.logical_shape;
    block.offset = s.offset();
    block.shape = s.shape();
    block.data.assign(s.data, s.data + shape_numel(block.shape));
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

bool TrainingCheckpoints::poll() {
  if (!enabled()) return false;
  if (!mesh_ || mesh_->world().size() == 1) {
    if (in_flight_step_ && saver_.done()) commit();
    return stop_requested();
  }
  // One all-reduce for both questions: does any rank want to stop, is any still writing.
  int32_t flags[2] = {stop_requested() ? 1 : 0, in_flight_step_ && !saver_.done() ? 1 : 0};
  mesh_->world().all_reduce(flags, 2, DType::i32, ReduceOp::max);
  if (in_flight_step_ && flags[1] == 0) commit();
  return flags[0] != 0;
}

void TrainingCheckpoints::finish() {
  if (!in_flight_step_) return;
  const auto t0 = std::chrono::steady_clock::now();
  saver_.wait();
  if (mesh_) mesh_->world().barrier();
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
  if (any_rank(mesh_, !error.empty())) {
    const int64_t step = *in_flight_step_;
    in_flight_step_.reset();
    NDT_CHECK(error.empty(), "{}", error);
    fail("checkpoint of step {}: rank 0 could not commit it", step);
  }
  if (rank() == 0) {
    if (log_) {
      const ckpt::WriteStats& w = saver_.last_stats();
      fmt::print(*log_, "checkpoint: step {} saved to {} (rank 0 wrote {:.1f} MB in {:.2f} s, {:.0f} MB/s)\n",
                 *in_flight_step_, final_dir.string(), w.bytes / 1e6, w.seconds,
                 w.seconds > 0 ? w.bytes / 1e6 / w.seconds : 0.0);
    }
  }
  in_flight_step_.reset();
}

std::filesystem::path resolve_resume(const std::string& resume, const std::filesystem::path& root) {
  if (resume != "latest") return resolve_checkpoint(resume);
  NDT_CHECK(!root.empty(), "checkpoint.resume = \"latest\" needs checkpoint.dir or runtime.out_dir");
  const std::optional<std::filesystem::path> latest = ckpt::latest_checkpoint(root);
  NDT_CHECK(latest.has_value(), "checkpoint.resume = \"latest\": no committed checkpoint under {}", root.string());
  return *latest;
}

nlohmann::json training_state(const RunConfig& config, int64_t step, const GradientSync& sync, DeviceMesh* mesh) {
  return {{"kind", "training"},
          {"step", step},
          {"optimizer_steps", sync.optimizer_steps()},
          {"seed", config.seed},
          // The loader, the schedule and the RNG keep no state beyond these: a batch is a
          // function of (seed, step), a learning rate of the step, a random draw of
          // (seed, stream, index).
          {"data", {{"train", config.train_data}, {"seed", config.seed}, {"next_step", step}}},
          {"schedule",
           {{"max_lr", config.schedule.max_lr},
            {"min_lr_ratio", config.schedule.min_lr_ratio},
            {"warmup_steps", config.schedule.warmup_steps},
            {"decay_steps", config.schedule.decay_steps},
            {"next_lr", config.schedule.at(step)}}},
          {"rng", {{"generator", "philox-4x32 (counter-based)"}, {"seed", config.seed}}},
          {"model", config_fields(config.model)},
          {"mesh", mesh ? mesh->shape().str() : std::string("one rank")},
          {"config", describe_run_config(config)}};
}

nlohmann::json load_training_checkpoint(const std::filesystem::path& dir, GradientSync& sync, const RunConfig& config,
                                        DeviceMesh* mesh) {
  ckpt::CheckpointReader reader(dir);
  const nlohmann::json& state = reader.state();
  NDT_CHECK(state.value("kind", "") == "training",
            "checkpoint {} holds a model only (kind \"{}\"), no optimizer state to resume from", dir.string(),
            state.value("kind", ""));
  const auto saved = state.at("model").get<std::map<std::string, std::string>>();
  const auto ours = config_fields(config.model);
  std::string differences;
  for (const auto& [key, value] : ours) {
    auto it = saved.find(key);
    const std::string theirs = it == saved.end() ? "(missing)" : it->second;
    if (theirs != value) differences += fmt::format("; model.{} = {} in the checkpoint, {} in this run", key, theirs, value);
  }
  NDT_CHECK(differences.empty(), "checkpoint {} does not match the model{}", dir.string(), differences);

  // Read everything first; apply only if every rank read all of its slices.
  std::vector<StateSlice> slices = sync.state_slices();
  std::vector<std::vector<float>> buffers(slices.size());
  std::string error;
  try {
    for (size_t i = 0; i < slices.size(); ++i) {
      const Shape shape = slices[i].shape();
      buffers[i].resize(static_cast<size_t>(shape_numel(shape)));
      reader.read_block(slices[i].tensor_name(), slices[i].param->spec.logical_shape, slices[i].offset(), shape,
                        buffers[i].data());
    }
  } catch (const Error& e) {
    error = e.what();
  }
  if (any_rank(mesh, !error.empty())) {
    NDT_CHECK(error.empty(), "{}", error);
    fail("checkpoint {}: another rank could not read its part; nothing was loaded", dir.string());
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    std::memcpy(slices[i].data, buffers[i].data(), buffers[i].size() * sizeof(float));
  }
  sync.set_optimizer_steps(state.at("optimizer_steps").get<int64_t>());
  return state;
}

}  // namespace ndt
