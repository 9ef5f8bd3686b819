#include "apps/ndtrain/commands.h"
#include "comm/device_mesh.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "data/prepare.h"
#include "plan/auto_layout.h"
#include "train/config.h"
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

namespace ndt {

namespace fs = std::filesystem;

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  // srun starting several tasks without an MPI process-management interface would start
  // that many independent one-rank runs: refuse it.
  const char* tasks = std::getenv("SLURM_NTASKS");
  NDT_CHECK(tasks == nullptr || std::atoi(tasks) <= 1,
            "started by srun as one of SLURM_NTASKS = {} tasks, but without an MPI process-management interface "
            "(no PMIx or PMI variables): launch with `srun --mpi=pmix` (or mpirun), see docs/multinode.md",
            tasks ? tasks : "");
  return false;
}

int launched_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* value = std::getenv(var)) return std::atoi(value);
  }
  return 0;
}

// The exit code of a run that a stop signal ended (after saving): 128 + the signal
// (143 for SIGTERM, 130 for SIGINT), as a shell reports a process the signal ended, so
// scripts can tell it from a finished run (train/stop_signal.h).
int exit_code(const RunSummary& summary) { return summary.stopped_by_signal ? 128 + summary.stop_signal : 0; }

namespace {

// parallel.layout = "auto": the layout the planner chose (plan/auto_layout.h), the same on
// every rank of `world`, with its prediction for the trainer to check; else the config
// as it is.
struct RunLayout {
  RunConfig config;
  std::optional<LayoutPrediction> prediction;
};

RunLayout run_layout(RunConfig config, const std::vector<std::string>& given_keys, Communicator& world,
                     int ranks_per_node) {
  if (config.layout == LayoutMode::manual) return {std::move(config), std::nullopt};
  ChosenLayout chosen = resolve_auto_layout(config, given_keys, world, ranks_per_node,
                                            world.rank() == 0 ? &std::cout : nullptr);
  return {std::move(chosen.config), std::move(chosen.prediction)};
}

int train_on(const RunLayout& run, DeviceMesh& mesh) {
  Trainer trainer(run.config, mesh, &std::cout);
  if (run.prediction) trainer.expect_layout(*run.prediction);
  return exit_code(trainer.run());
}

}  // namespace

int run_train(const std::string& config_path, const std::vector<std::string>& overrides) {
  RunConfig config = read_run_config(config_path, overrides);
  // Under parallel.layout = "auto" the layout keys are checked on each candidate, and the
  // whole config by the trainer once the layout is chosen.
  if (config.layout == LayoutMode::manual) config.validate();
  const std::vector<std::string> given_keys = given_config_keys(config_path, overrides);
  if (!launched_by_mpi()) {
    SelfCommunicator self;
    const RunLayout run = run_layout(std::move(config), given_keys, self, 1);
    run.config.resolve_mesh(1);
    DeviceMesh mesh;
    return train_on(run, mesh);
  }
  set_comm_timeout_seconds(config.comm_timeout_s);
  std::unique_ptr<Communicator> world = mpi_world();
  NodeTopology nodes = detect_node_topology(*world);
  const RunLayout run = run_layout(std::move(config), given_keys, *world, nodes.ranks_per_node());
  const MeshShape shape = run.config.resolve_mesh(world->size(), nodes.ranks_per_node());
  DeviceMesh mesh(*world, shape, std::move(nodes));
  const int code = train_on(run, mesh);
  world->barrier();
  return code;
}

namespace {

// Where the first NUL byte of the file's first 64 KiB is (-1: none, text).
int64_t first_nul_byte(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(65536);
  in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  const auto end = buffer.begin() + in.gcount();
  const auto nul = std::find(buffer.begin(), end, '\0');
  return nul == end ? -1 : nul - buffer.begin();
}

// A text file: a regular file (not a link to one) whose first 64 KiB hold no NUL byte.
bool is_text_file(const fs::path& path) {
  return !fs::is_symlink(path) && fs::is_regular_file(path) && first_nul_byte(path) < 0;
}

// A folder's text files, sorted; the regular files left out (not text) are said.
std::vector<std::string> text_files_in(const std::string& folder) {
  std::vector<std::string> found, left_out;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (is_text_file(entry.path())) {
      found.push_back(entry.path().string());
    } else if (!entry.is_symlink() && entry.is_regular_file()) {
      left_out.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  std::sort(left_out.begin(), left_out.end());
  NDT_CHECK(!found.empty(), "prepare input folder \"{}\" holds no text files", folder);
  if (!left_out.empty()) {
    fmt::print("prepare: left out {} file{} of {} that {} not text (a NUL byte in the first 64 KiB): {}{}\n",
               left_out.size(), left_out.size() == 1 ? "" : "s", folder, left_out.size() == 1 ? "is" : "are",
               left_out.front(), left_out.size() > 1 ? fmt::format(" and {} more", left_out.size() - 1) : "");
  }
  return found;
}

}  // namespace

std::vector<std::string> expand_prepare_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    NDT_CHECK(fs::exists(input), "prepare input \"{}\" does not exist", input);
    if (fs::is_directory(input)) {
      const std::vector<std::string> found = text_files_in(input);
      files.insert(files.end(), found.begin(), found.end());
    } else {
      const int64_t nul = fs::is_regular_file(input) ? first_nul_byte(input) : -1;
      NDT_CHECK(nul < 0, "prepare input \"{}\" is not text: it holds a NUL byte at offset {}. prepare makes byte-level "
                "shards of text files (a folder's other files are left out and said)", input, nul);
      files.push_back(input);
    }
  }
  return files;
}

int run_prepare(const std::vector<std::string>& inputs, const std::string& out_dir, double val_fraction,
                bool force) {
  const std::vector<std::string> files = expand_prepare_inputs(inputs);
  const PrepareResult r = prepare_byte_shards(files, out_dir, val_fraction, force);
  fmt::print("prepared {} files: {} training tokens -> {}, {} validation tokens -> {}\n", r.files,
             r.train_tokens, r.train_path, r.val_tokens, r.val_path);
  return 0;
}

int run_config_doc() {
  fmt::print("# ndtrain configuration keys\n\n");
  fmt::print("A config is a TOML file with the sections below; any key can also be set on the\n");
  fmt::print("command line with `--set section.key=value`. Unknown keys are errors.\n\n");
  fmt::print("| key | default | meaning |\n|---|---|---|\n");
  for (const ConfigFieldDoc& f : config_field_docs()) {
    fmt::print("| `{}` | `{}` | {} |\n", f.key, f.default_value, f.doc);
  }
  return 0;
}

}  // namespace ndt
