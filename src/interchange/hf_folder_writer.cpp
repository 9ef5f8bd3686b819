#include "interchange/hf_folder_writer.h"

#include "core/error.h"
#include "core/output_file.h"
#include "interchange/hf_config.h"
#include "interchange/hf_names.h"
#include "interchange/stored_values.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace ndt {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  AtomicFile out(path.string());
  out.write(text.data(), text.size());
  out.commit();
}

// The tensors split into shards of at most max_shard_bytes each (in name order).
std::vector<SafetensorsFile> pack_shards(std::map<std::string, SafetensorsTensor> tensors, DType dtype,
                                         uint64_t max_shard_bytes) {
  std::vector<SafetensorsFile> shards(1);
  uint64_t used = 0;
  for (auto& [name, t] : tensors) {
    const uint64_t bytes = t.values.size() * dtype_size(dtype);
    if (used > 0 && used + bytes > max_shard_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().metadata["format"] = "pt";  // transformers refuses safetensors without it
    shards.back().tensors[name] = std::move(t);
    used += bytes;
  }
  return shards;
}

}  // namespace

void write_hf_folder(const ModelState& state, const std::string& dir, DType dtype, uint64_t max_shard_bytes,
                     const std::vector<std::string>& side_files) {
  NDT_CHECK(max_shard_bytes > 0, "the shard size limit must be positive (it is 0)");
  const std::string config = hf_config_json(state.config, dtype == DType::f32 ? "float32" : dtype == DType::bf16 ? "bfloat16" : "float16");
  std::map<std::string, SafetensorsTensor> tensors = hf_tensors_of(state);
  for (const auto& [name, t] : tensors) check_storable(dir, name, t.values, dtype);
  for (const std::string& file : side_files) NDT_CHECK(fs::is_regular_file(file), "cannot copy {}: no such file", file);
  NDT_CHECK(!fs::exists(dir), "{} already exists: a Hugging Face folder is written into a new directory", dir);
  fs::create_directories(dir);
  write_text(fs::path(dir) / "config.json", config);
  const std::vector<SafetensorsFile> shards = pack_shards(std::move(tensors), dtype, max_shard_bytes);
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], dtype);
  } else {
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    uint64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, shards.size());
      write_safetensors((fs::path(dir) / name).string(), shards[i], dtype);
      for (const auto& [tensor, t] : shards[i].tensors) {
        index["weight_map"][tensor] = name;
        total += t.values.size() * dtype_size(dtype);
      }
    }
    index["metadata"]["total_size"] = total;
    write_text(fs::path(dir) / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  for (const std::string& file : side_files) fs::copy_file(file, fs::path(dir) / fs::path(file).filename());
}

}  // namespace ndt
