#include "train/init_from.h"

#include "checkpoint/box.h"
#include "core/error.h"
#include "model/lora.h"
#include "train/agreed_error.h"
#include "train/model_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace ndt {

void load_initial_weights(const std::string& path, const ModelConfig& model, GradientSync& sync, DeviceMesh& mesh) {
  // Every rank reads the whole model and keeps the boxes its parameter slices need, so
  // any layout starts from the same values. The optimizer state stays fresh (zeros, no
  // steps).
  std::vector<StateSlice> slices = sync.state_slices();
  std::vector<std::vector<float>> buffers(slices.size());
  std::string error;
  try {
    // The run's model is the hint for what a file without ndtrain metadata cannot carry
    // (n_head, norm_eps, ...: source.assumed); every field the file carries must agree,
    // except those that change only the training objective, which a new run chooses.
    const ModelState source = read_model_file(path, model);
    std::set<std::string> ignored = source.assumed;
    ignored.insert(objective_only_fields().begin(), objective_only_fields().end());
    if (model.arch == Arch::llama) ignored.insert("max_seq_len");  // no position table to size
    const std::string differences = config_differences(source.config, model, "there", ignored);
    NDT_CHECK(differences.empty(), "train.init_from = \"{}\" does not match the model{}", path,
              differences);
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
      for (float v : whole) {
        NDT_CHECK(std::isfinite(v), "train.init_from = \"{}\": tensor {} holds {}", path, p.name(), v);
      }
      const ckpt::Box box{slices[i].offset(), slices[i].shape()};
      buffers[i].resize(static_cast<size_t>(ckpt::box_numel(box)));
      ckpt::copy_region(box, whole.data(), ckpt::Box{Shape(box.offset.size(), 0), p.spec.logical_shape}, 0,
                        buffers[i].data(), box);
    }
  } catch (const Error& e) {
    error = e.what();
  }
  throw_if_any_rank_failed(mesh, error);
  for (size_t i = 0; i < slices.size(); ++i) {
    if (!buffers[i].empty()) slices[i].write(0, static_cast<int64_t>(buffers[i].size()), buffers[i].data());
  }
}

}  // namespace ndt
