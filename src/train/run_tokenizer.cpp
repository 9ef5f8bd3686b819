#include "train/run_tokenizer.h"

#include "core/error.h"
#include "data/dataset_spec.h"
#include "data/tokenizer_record.h"

#include <fstream>
#include <vector>

namespace ndt {

nlohmann::json checkpoint_data_state(const std::filesystem::path& checkpoint) {
  std::ifstream in(checkpoint / "metadata.json");
  const nlohmann::json metadata = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (metadata.is_object() && metadata.contains("state") && metadata["state"].contains("data")) {
    return metadata["state"]["data"];
  }
  return nullptr;
}

std::optional<std::string> recorded_run_tokenizer(const nlohmann::json& data) {
  const nlohmann::json* train = data.is_object() && data.contains("train") ? &data["train"] : nullptr;
  if (train == nullptr || !train->is_string() || train->get<std::string>().empty()) return std::nullopt;
  try {
    const std::vector<std::string> shards = resolve_shards("data.train", train->get<std::string>());
    return recorded_tokenizer(shards.front());
  } catch (const Error&) {  // the shards moved
    return std::nullopt;
  }
}

}  // namespace ndt
