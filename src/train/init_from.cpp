#include "train/init_from.h"

#include "checkpoint/box.h"
#include "core/error.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_slice_reader.h"
#include "model/lora.h"
#include "train/agreed_error.h"
#include "train/model_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace ndt {

namespace {

// Every field the source describes must agree with the run's model, except those that
// change only the training objective (a new run chooses them), those the source could
// not carry (`assumed`), and a llama model's max_seq_len (no position table to size).
void check_same_model(const std::string& path, const ModelConfig& theirs, const ModelConfig& model,
                      std::set<std::string> ignored, std::string_view where) {
  ignored.insert(objective_only_fields().begin(), objective_only_fields().end());
  if (model.arch == Arch::llama) ignored.insert("max_seq_len");
  const std::string differences = config_differences(theirs, model, where, ignored);
  NDT_CHECK(differences.empty(), "train.init_from = \"{}\" does not match the model{}", path, differences);
}

void check_finite(const std::string& path, const std::string& name, const std::vector<float>& values) {
  for (float v : values) NDT_CHECK(std::isfinite(v), "train.init_from = \"{}\": tensor {} holds {}", path, name, v);
}

// A whole-model file: every rank reads it all and keeps the boxes of its slices.
uint64_t read_whole_model(const std::string& path, const ModelConfig& model, const std::vector<StateSlice>& slices,
                          std::vector<std::vector<float>>& buffers) {
  // The run's model is the hint for what a file without ndtrain metadata cannot carry
  // (n_head, norm_eps, ...: source.assumed).
  const ModelState source = read_model_file(path, model);
  check_same_model(path, source.config, model, source.assumed, "there");
  uint64_t bytes = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].kind != StateSlice::value) continue;
    const Parameter& p = *slices[i].param;
    const auto it = source.tensors.find(p.name());
    // Fine-tuning a base model with LoRA: the adapters the file lacks keep their
    // initialisation (B = 0, so the model starts as the file's).
    if (it == source.tensors.end() && is_lora_parameter(p.name())) continue;
    NDT_CHECK(it != source.tensors.end(), "train.init_from = \"{}\" has no tensor {}", path, p.name());
    const std::vector<float>& whole = it->second;
    NDT_CHECK(static_cast<int64_t>(whole.size()) == shape_numel(p.spec.logical_shape),
              "train.init_from = \"{}\": tensor {} has {} values, the model's {} has {}", path, p.name(),
              whole.size(), shape_str(p.spec.logical_shape), shape_numel(p.spec.logical_shape));
    check_finite(path, p.name(), whole);
    const ckpt::Box box{slices[i].offset(), slices[i].shape()};
    buffers[i].resize(static_cast<size_t>(ckpt::box_numel(box)));
    ckpt::copy_region(box, whole.data(), ckpt::Box{Shape(box.offset.size(), 0), p.spec.logical_shape}, 0,
                      buffers[i].data(), box);
  }
  for (const auto& [name, values] : source.tensors) bytes += values.size() * sizeof(float);
  return bytes;
}

// A Hugging Face folder: each rank reads only the boxes of its slices from the shards.
uint64_t read_folder_slices(const std::string& path, const ModelConfig& model, const std::vector<StateSlice>& slices,
                            std::vector<std::vector<float>>& buffers) {
  const HfFolder folder = open_hf_folder(path);
  check_same_model(path, folder.config, model, {}, "in its config.json");
  HfSliceReader reader(folder);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].kind != StateSlice::value) continue;
    const Parameter& p = *slices[i].param;
    if (is_lora_parameter(p.name())) continue;  // a base model's folder: the adapters keep their start
    buffers[i].resize(static_cast<size_t>(shape_numel(slices[i].shape())));
    reader.read(p.name(), slices[i].offset(), slices[i].shape(), buffers[i].data());
    check_finite(path, p.name(), buffers[i]);
  }
  return reader.bytes_read();
}

}  // namespace

uint64_t load_initial_weights(const std::string& path, const ModelConfig& model, GradientSync& sync,
                              DeviceMesh& mesh) {
  // Any layout starts from the same values; the optimizer state stays fresh (zeros, no
  // steps).
  std::vector<StateSlice> slices = sync.state_slices();
  std::vector<std::vector<float>> buffers(slices.size());
  std::string error;
  uint64_t bytes_read = 0;
  try {
    bytes_read = is_hf_folder(path) ? read_folder_slices(path, model, slices, buffers)
                                    : read_whole_model(path, model, slices, buffers);
  } catch (const Error& e) {
    error = e.what();
  }
  throw_if_any_rank_failed(mesh, error);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (!buffers[i].empty()) slices[i].write(0, static_cast<int64_t>(buffers[i].size()), buffers[i].data());
  }
  return bytes_read;
}

}  // namespace ndt
