// ndtrain checkpoints as a model format: write_model_checkpoint / read_model_checkpoint
// round trips (also from a training-style checkpoint split over ranks, with optimizer
// moments), resolve_checkpoint, and the built `ndtrain convert` and `ndtrain generate`
// run as a user would: a chain of conversions through every format, --dtype bf16/f16
// exports read back as the rounded weights, sampling, errors.
#include "../common/errors.h"
#include "../common/full_disk.h"
#include "../common/temp_dir.h"
#include "checkpoint/commit.h"
#include "checkpoint/directory.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "interchange/safetensors.h"
#include "support.h"
#include "train/model_checkpoint.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

namespace ndt {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs the built ndtrain with `args`; `output` is its stdout, with stderr too if asked.
CommandResult ndtrain(const std::string& args, bool with_stderr = true) {
  const std::string command =
      std::string(NDT_BINARY_DIR) + "/ndtrain " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `state` as a checkpoint written elsewhere (or by an ndtrain from before the guards)
// would hold it: write_model_checkpoint refuses non-finite weights.
void write_unchecked_checkpoint(const ModelState& state, const fs::path& dir) {
  std::vector<ckpt::TensorBlock> blocks;
  for (const ParameterSpec& spec : model_parameter_specs(state.config)) {
    blocks.push_back({spec.name, spec.logical_shape, Shape(spec.logical_shape.size(), 0), spec.logical_shape,
                      state.tensors.at(spec.name)});
  }
  fs::path tmp = dir;
  tmp += ".tmp";
  ckpt::write_rank_file(tmp, 0, blocks);
  ckpt::commit_checkpoint(tmp, dir, 1, {{"model", config_fields(state.config)}});
}

TEST(ModelCheckpoint, RoundTripIsBitExact) {
  for (const ModelConfig& config :
       {ModelConfig::preset("gpt2-tiny"), ModelConfig::preset("llama-tiny"), testing::llama_qk_norm()}) {
    TempDir dir;
    const ModelState state = testing::perturbed_state(config);
    write_model_checkpoint(state, dir.path() / "model", 42);
    testing::expect_same_state(read_model_checkpoint(dir.path() / "model"), state);
    const nlohmann::json saved = ckpt::CheckpointReader(dir.path() / "model").state();
    EXPECT_EQ(saved["kind"], "model");
    EXPECT_EQ(saved["step"], 42);
    EXPECT_FALSE(fs::exists(dir.file("model.tmp")));
  }
}

TEST(ModelCheckpoint, WriteRefusesAnExistingDirectory) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  fs::create_directories(dir.path() / "model");
  expect_error([&] { write_model_checkpoint(state, dir.path() / "model"); }, {dir.file("model"), "already exists"});
}

// A checkpoint as the trainer writes it: each parameter's rows split over two ranks,
// AdamW moments beside them, kind "training".
TEST(ModelCheckpoint, ReadsTheParametersOfATrainingCheckpoint) {
  TempDir root;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("llama-tiny"));
  const fs::path tmp = ckpt::make_tmp_checkpoint_dir(root.path(), 7);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<ckpt::TensorBlock> blocks;
    for (const ParameterSpec& spec : model_parameter_specs(state.config)) {
      const int64_t rows = spec.logical_shape[0], half = rows / 2;
      const int64_t row_size = shape_numel(spec.logical_shape) / rows;
      Shape offset(spec.logical_shape.size(), 0), shape = spec.logical_shape;
      offset[0] = rank == 0 ? 0 : half;
      shape[0] = rank == 0 ? half : rows - half;
      const float* first = state.tensors.at(spec.name).data() + offset[0] * row_size;
      std::vector<float> part(first, first + shape[0] * row_size);
      for (const char* moment : {"optim.exp_avg.", "optim.exp_avg_sq."}) {
        blocks.push_back({moment + spec.name, spec.logical_shape, offset, shape, part});
      }
      blocks.push_back({spec.name, spec.logical_shape, offset, shape, std::move(part)});
    }
    ckpt::write_rank_file(tmp, rank, blocks);
  }
  const fs::path dir = root.path() / ckpt::checkpoint_dir_name(7);
  ckpt::commit_checkpoint(tmp, dir, 2,
                          {{"kind", "training"}, {"step", 7}, {"model", config_fields(state.config)}});
  testing::expect_same_state(read_model_checkpoint(dir), state);
}

TEST(ModelCheckpoint, ReadErrorsNameTheDirectoryAndWhatIsMissing) {
  TempDir root;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  expect_error([&] { read_model_checkpoint(root.path() / "absent"); }, {"absent", "metadata.json"});

  fs::path tmp = ckpt::make_tmp_checkpoint_dir(root.path(), 1);
  ckpt::write_rank_file(tmp, 0, {{"w", {2}, {0}, {2}, {1, 2}}});
  ckpt::commit_checkpoint(tmp, root.path() / "no_config", 1, {{"step", 1}});
  expect_error([&] { read_model_checkpoint(root.path() / "no_config"); },
               {root.file("no_config"), "no model config"});

  tmp = ckpt::make_tmp_checkpoint_dir(root.path(), 2);
  ckpt::write_rank_file(tmp, 0, {{"lnf.weight", {128}, {0}, {128}, state.tensors.at("lnf.weight")}});
  ckpt::commit_checkpoint(tmp, root.path() / "partial", 1, {{"model", config_fields(state.config)}});
  expect_error([&] { read_model_checkpoint(root.path() / "partial"); },
               {root.file("partial"), "lacks parameter wte.weight"});
}

TEST(ResolveCheckpoint, FindsTheDirectoryTheLatestStepOrARunsCheckpoints) {
  TempDir run;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  const fs::path root = run.path() / "checkpoints";
  write_model_checkpoint(state, root / ckpt::checkpoint_dir_name(10), 10);
  write_model_checkpoint(state, root / ckpt::checkpoint_dir_name(20), 20);
  fs::create_directories(root / (ckpt::checkpoint_dir_name(30) + ".tmp"));  // a crashed save
  const fs::path latest = root / ckpt::checkpoint_dir_name(20);

  EXPECT_EQ(resolve_checkpoint((root / ckpt::checkpoint_dir_name(10)).string()),
            root / ckpt::checkpoint_dir_name(10));
  EXPECT_EQ(resolve_checkpoint(root.string()), latest);
  EXPECT_EQ(resolve_checkpoint(run.path().string()), latest);
  expect_error([&] { resolve_checkpoint(run.file("nowhere")); }, {run.file("nowhere"), "does not exist"});
  fs::create_directories(run.path() / "empty");
  expect_error([&] { resolve_checkpoint(run.file("empty")); }, {run.file("empty"), "no checkpoint"});
}

TEST(ConvertCommand, ChainThroughEveryFormatIsBitExact) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  write_model_checkpoint(state, dir.path() / "run" / "checkpoints" / ckpt::checkpoint_dir_name(5), 5);
  const std::vector<std::pair<std::string, std::string>> steps = {
      {dir.file("run"), dir.file("model.safetensors")},
      {dir.file("model.safetensors"), dir.file("from_hf")},
      {dir.file("from_hf"), dir.file("model.bin")},
      {dir.file("model.bin"), dir.file("from_llmc")}};
  for (const auto& [from, to] : steps) {
    const CommandResult r = ndtrain("convert --from " + from + " --to " + to);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "gpt2, 4 layers, d_model 128")) << r.output;
    EXPECT_TRUE(contains(r.output, std::to_string(state.tensors.size()) + " tensors")) << r.output;
    EXPECT_TRUE(contains(r.output, "MB/s")) << r.output;
  }
  testing::expect_same_state(read_model_checkpoint(dir.path() / "from_llmc"), state);
}

// Catches: --dtype not reaching the writer (an F32 file, version 3), or an export that
// does not come back as the rounded weights.
TEST(ConvertCommand, DtypeExportsTheRoundedWeightsAndTheyComeBack) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  write_model_checkpoint(state, dir.path() / "model", 3);
  struct Case {
    std::string to, dtype, header_dtype, format;
  };
  for (const Case& c : {Case{"m.safetensors", "bf16", "BF16", "Hugging Face safetensors"},
                        Case{"m16.safetensors", "f16", "F16", "Hugging Face safetensors"},
                        Case{"m.bin", "bf16", "", "llm.c checkpoint"}}) {
    const std::string to = dir.file(c.to), back = dir.file(c.to + ".back");
    const CommandResult r = ndtrain("convert --from " + dir.file("model") + " --to " + to + " --dtype " + c.dtype);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "-> " + to + " (" + c.format + ", " + c.dtype + ")")) << r.output;
    if (c.header_dtype.empty()) {
      int32_t version = 0;
      std::memcpy(&version, testing::read_bytes(to).data() + 4, 4);
      EXPECT_EQ(version, kLlmcVersionBf16);
    } else {
      EXPECT_EQ(testing::safetensors_dtypes(to), std::set<std::string>{c.header_dtype});
    }
    const CommandResult imported = ndtrain("convert --from " + to + " --to " + back);
    ASSERT_EQ(imported.exit_code, 0) << imported.output;
    EXPECT_TRUE(contains(imported.output, "(ndtrain checkpoint, f32)")) << imported.output;
    testing::expect_same_state(read_model_checkpoint(back), testing::rounded_to(state, dtype_from_name(c.dtype)));
  }
}

TEST(ConvertCommand, DtypeErrorsNameTheOptionTheValueAndWhatIsAccepted) {
  TempDir dir;
  write_model_checkpoint(testing::perturbed_state(ModelConfig::preset("gpt2-tiny")), dir.path() / "model", 3);
  struct Case {
    std::string to, dtype, message;
  };
  for (const Case& c :
       {Case{"m.safetensors", "fp64", "ndtrain: error: --dtype fp64 is not supported (accepted: f32, bf16, f16)"},
        Case{"m.safetensors", "e4m3", "--dtype e4m3 is not supported (accepted: f32, bf16, f16)"},
        Case{"m.bin", "f16", "--dtype f16: llm.c checkpoints hold f32 (version 3) or bf16 (version 5) parameters"},
        Case{"out", "bf16", "--dtype bf16: ndtrain checkpoints hold f32 parameters"}}) {
    const CommandResult r =
        ndtrain("convert --from " + dir.file("model") + " --to " + dir.file(c.to) + " --dtype " + c.dtype);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, c.message)) << r.output;
    EXPECT_FALSE(fs::exists(dir.file(c.to))) << c.to;
  }
}

// A Hugging Face file from elsewhere has no ndtrain config: --n-head completes it.
TEST(ConvertCommand, NHeadCompletesTheConfigOfForeignSafetensors) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  save_safetensors_hf(state, dir.file("ndtrain.safetensors"));
  SafetensorsFile file = read_safetensors(dir.file("ndtrain.safetensors"));
  file.metadata = {{"format", "pt"}};
  write_safetensors(dir.file("foreign.safetensors"), file);

  const std::string convert = "convert --from " + dir.file("foreign.safetensors") + " --to " + dir.file("model");
  const CommandResult without = ndtrain(convert);
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_TRUE(contains(without.output, "n_head cannot be inferred")) << without.output;
  const CommandResult with = ndtrain(convert + " --n-head 4");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  testing::expect_same_state(read_model_checkpoint(dir.path() / "model"), state);
}

TEST(ConvertCommand, ErrorsExitNonZeroNamingThePath) {
  TempDir dir;
  CommandResult r = ndtrain("convert --from " + dir.file("missing") + " --to " + dir.file("out.safetensors"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "ndtrain: error: checkpoint path " + dir.file("missing") + " does not exist"))
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("out.safetensors")));

  testing::write_bytes(dir.file("taken.bin"), "x");
  r = ndtrain("convert --from " + dir.file("missing") + " --to " + dir.file("taken.bin"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, dir.file("taken.bin") + " already exists")) << r.output;
}

// Catches: a convert onto a full disk leaving a partial file (or its temporary) that
// then blocks the rerun, since convert does not overwrite; or the failure reported
// without the file and the reason.
TEST(ConvertCommand, FullDiskLeavesNoFileAndTheRerunSucceeds) {
  TempDir dir;
  const ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  write_model_checkpoint(state, dir.path() / "run" / "checkpoints" / ckpt::checkpoint_dir_name(5), 5);
  fs::create_directories(dir.path() / "out");
  for (const std::string name : {"model.safetensors", "model.bin"}) {
    const std::string to = dir.file("out/" + name);
    const std::string convert = "convert --from " + dir.file("run") + " --to " + to;
    {
      testing::FullDisk full(1 << 20);  // inherited by the child: the model is about 4 MB
      const CommandResult r = ndtrain(convert);
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_TRUE(contains(r.output, "writing " + to + " failed: File too large")) << r.output;
    }
    EXPECT_TRUE(testing::entries_of(dir.path() / "out").empty());
    const CommandResult rerun = ndtrain(convert);
    EXPECT_EQ(rerun.exit_code, 0) << rerun.output;
    fs::remove(to);
  }
}

// Catches: an unwritable target reported without the reason, or leaving a file.
TEST(ConvertCommand, UnwritableTargetIsAnErrorNamingItAndTheReason) {
  TempDir dir;
  write_model_checkpoint(testing::perturbed_state(ModelConfig::preset("gpt2-tiny")), dir.path() / "model", 1);
  const std::string to = "/proc/ndtrain-test.safetensors";
  const CommandResult r = ndtrain("convert --from " + dir.file("model") + " --to " + to);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "cannot create " + to + ": No such file or directory")) << r.output;
  EXPECT_FALSE(fs::exists(to));
}

TEST(GenerateCommand, PrintsThePromptAndTheSameContinuationForASeed) {
  TempDir dir;
  write_model_checkpoint(testing::perturbed_state(ModelConfig::preset("gpt2-tiny")), dir.path() / "model");
  const std::string args = "generate --checkpoint " + dir.file("model") + " --prompt 'Hello' --tokens 20 --seed ";
  const CommandResult first = ndtrain(args + "1", false), again = ndtrain(args + "1", false);
  const CommandResult other = ndtrain(args + "2", false);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.output.size(), 5u + 20u + 1u) << first.output;
  EXPECT_EQ(first.output.substr(0, 5), "Hello");
  EXPECT_EQ(first.output.back(), '\n');
  EXPECT_EQ(again.output, first.output);
  EXPECT_NE(other.output, first.output);

  const CommandResult raw =
      ndtrain("generate --checkpoint " + dir.file("model") + " --raw-tokens --prompt '72, 105' --tokens 3");
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_EQ(raw.output.substr(0, 7), "72,105,");
  EXPECT_EQ(std::count(raw.output.begin(), raw.output.end(), ','), 4) << raw.output;
}

TEST(GenerateCommand, ErrorsExitNonZero) {
  TempDir dir;
  CommandResult r = ndtrain("generate --checkpoint " + dir.file("missing") + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "checkpoint path " + dir.file("missing") + " does not exist")) << r.output;

  r = ndtrain("generate --checkpoint " + dir.path().string() + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "no checkpoint at " + dir.path().string())) << r.output;

  ModelConfig config = ModelConfig::preset("llama-tiny");
  config.vocab_size = 300;
  write_model_checkpoint(testing::perturbed_state(config), dir.path() / "model");
  r = ndtrain("generate --checkpoint " + dir.file("model") + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "vocab_size 300")) << r.output;
  EXPECT_TRUE(contains(r.output, "--raw-tokens")) << r.output;
  r = ndtrain("generate --checkpoint " + dir.file("model") + " --raw-tokens --prompt '1,299,300' --tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "'300' is not a token id in [0, 300)")) << r.output;
}

// Catches: convert writing what no reader can use without a word: a ".pt" destination
// made a checkpoint folder, NaN weights copied into a checkpoint, f16 overflow stored as
// inf. Nothing is written in each case.
TEST(ConvertCommand, RefusesToWriteWhatNoReaderCouldUse) {
  TempDir dir;
  ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  write_model_checkpoint(state, dir.path() / "model");
  CommandResult r = ndtrain("convert --from " + dir.file("model") + " --to " + dir.file("model.pt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "cannot write " + dir.file("model.pt") + ": .pt files are not a format ndtrain "
                                  "writes")) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "model.pt"));

  state.tensors.at("blocks.1.attn.wo.weight")[5] = 70000.0f;  // finite in f32 and bf16, beyond f16's 65504
  write_model_checkpoint(state, dir.path() / "large");
  r = ndtrain("convert --from " + dir.file("large") + " --to " + dir.file("large.safetensors") + " --dtype f16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "as f16: tensor blocks.1.attn.wo.weight element 5 = 70000 is beyond f16's range and "
                                  "would be stored as inf (store it as f32 or bf16)")) << r.output;
  EXPECT_FALSE(fs::exists(dir.path() / "large.safetensors"));
  r = ndtrain("convert --from " + dir.file("large") + " --to " + dir.file("large.safetensors") + " --dtype bf16");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  state.tensors.at("blocks.0.mlp.proj.weight")[2] = std::numeric_limits<float>::quiet_NaN();
  write_unchecked_checkpoint(state, dir.path() / "broken");
  for (const std::string to : {"broken-copy", "broken.safetensors", "broken.bin"}) {
    r = ndtrain("convert --from " + dir.file("broken") + " --to " + dir.file(to));
    EXPECT_EQ(r.exit_code, 1) << to;
    EXPECT_TRUE(contains(r.output, "tensor blocks.0.mlp.proj.weight holds nan at element 2")) << r.output;
    EXPECT_FALSE(fs::exists(dir.path() / to)) << to;
  }
}

// Catches: generate printing noise from a checkpoint with non-finite weights (one
// written elsewhere, or by an ndtrain from before the non-finite guard) without a word.
TEST(GenerateCommand, NonFiniteWeightsAreAnError) {
  TempDir dir;
  ModelState state = testing::perturbed_state(ModelConfig::preset("gpt2-tiny"));
  state.tensors.at("blocks.0.mlp.fc.weight")[3] = std::numeric_limits<float>::quiet_NaN();
  write_unchecked_checkpoint(state, dir.path() / "model");
  const CommandResult r = ndtrain("generate --checkpoint " + dir.file("model") + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "tensor blocks.0.mlp.fc.weight holds nan at element 3")) << r.output;
}

}  // namespace
}  // namespace ndt
