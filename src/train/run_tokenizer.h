// The tokenizer a checkpoint's run trained with: the record `ndtrain prepare --tokenizer`
// left beside the training shards the checkpoint's data state names. Shared by
// `ndtrain generate` (to decode) and `ndtrain convert --to-hf` (to copy into the folder).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace ndt {

// The checkpoint's metadata.json state["data"] (null when it has none).
nlohmann::json checkpoint_data_state(const std::filesystem::path& checkpoint);

// The tokenizer file recorded beside the first training shard `data` names
// (data["train"]), or nullopt: no shards named, the shards moved, or no record beside them.
std::optional<std::string> recorded_run_tokenizer(const nlohmann::json& data);

}  // namespace ndt
