#include "train/model_checkpoint.h"

#include "checkpoint/commit.h"
#include "checkpoint/directory.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "core/error.h"
#include "interchange/stored_values.h"

namespace ndt {

namespace fs = std::filesystem;

ModelConfig saved_model_config(const ckpt::CheckpointReader& reader, const fs::path& dir) {
  const nlohmann::json& state = reader.state();
  NDT_CHECK(state.is_object() && state.contains("model") && state["model"].is_object(),
            "checkpoint {} holds no model config (metadata.json state.model): not written by ndtrain's "
            "trainer or convert",
            dir.string());
  std::map<std::string, std::string> fields;
  for (const auto& [key, value] : state["model"].items()) {
    NDT_CHECK(value.is_string(), "checkpoint {}: model config field {} is {}, expected a string", dir.string(),
              key, value.dump());
    fields[key] = value.get<std::string>();
  }
  const ModelConfig config = config_from_fields(fields, "checkpoint " + dir.string());
  if (!fields.count("n_experts")) {
    for (const std::string& name : reader.tensor_names()) {
      NDT_CHECK(name.find(".moe.") == std::string::npos,
                "checkpoint {} holds mixture-of-experts parameters ({}) but its model description has no "
                "model.n_experts (it was written before ndtrain saved MoE settings): the experts and routing it "
                "was trained with are unknown",
                dir.string(), name);
    }
  }
  return config;
}

ModelState read_model_checkpoint(const fs::path& dir) {
  ckpt::CheckpointReader reader(dir);
  ModelState model{saved_model_config(reader, dir), {}, {}};
  for (const ParameterSpec& spec : model_parameter_specs(model.config)) {
    NDT_CHECK(reader.has(spec.name), "checkpoint {} lacks parameter {} of its model", dir.string(), spec.name);
    NDT_CHECK(reader.logical_shape(spec.name) == spec.logical_shape,
              "checkpoint {}: parameter {} has shape {}, its model config says {}", dir.string(), spec.name,
              shape_str(reader.logical_shape(spec.name)), shape_str(spec.logical_shape));
    std::vector<float>& values = model.tensors[spec.name];
    values.resize(shape_numel(spec.logical_shape));
    reader.read_block(spec.name, spec.logical_shape, Shape(spec.logical_shape.size(), 0), spec.logical_shape,
                      values.data());
  }
  return model;
}

void write_model_checkpoint(const ModelState& state, const fs::path& dir, int64_t step) {
  check_model_state(state);
  for (const auto& [name, values] : state.tensors) check_storable(dir.string(), name, values, DType::f32);
  fs::path target = dir.lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" -> "out"
  NDT_CHECK(!target.empty(), "cannot write a model checkpoint to an empty path");
  NDT_CHECK(!fs::exists(target), "cannot write model checkpoint {}: it already exists", target.string());
  fs::path tmp = target;
  tmp += ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  NDT_CHECK(!ec, "cannot remove leftover {}: {}", tmp.string(), ec.message());

  std::vector<ckpt::TensorBlock> blocks;
  for (const ParameterSpec& spec : model_parameter_specs(state.config)) {
    blocks.push_back({spec.name, spec.logical_shape, Shape(spec.logical_shape.size(), 0), spec.logical_shape,
                      state.tensors.at(spec.name)});
  }
  ckpt::write_rank_file(tmp, 0, blocks);
  const nlohmann::json extra = {{"kind", "model"}, {"step", step}, {"model", config_fields(state.config)}};
  ckpt::commit_checkpoint(tmp, target, 1, extra);
}

fs::path resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  NDT_CHECK(fs::exists(p), "checkpoint path {} does not exist", path);
  if (fs::exists(p / ckpt::kMetadataFile)) return p;
  for (const fs::path& root : {p, p / "checkpoints"}) {
    if (auto latest = ckpt::latest_checkpoint(root)) return *latest;
  }
  fail("no checkpoint at {}: expected a checkpoint directory (with {}), a folder of step-* checkpoints, or a "
       "run folder with checkpoints/",
       path, ckpt::kMetadataFile);
}

}  // namespace ndt
