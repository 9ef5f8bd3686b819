#include "train/metrics.h"

#include "core/error.h"

#include <filesystem>

namespace ndt {

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    NDT_CHECK(!ec, "cannot create folder \"{}\": {}", p.parent_path().string(), ec.message());
  }
  out_ = std::make_unique<AppendFile>(path, /*truncate=*/!append);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (out_) out_->append(record.dump() + '\n');
}

}  // namespace ndt
