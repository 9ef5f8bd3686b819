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
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  NDT_CHECK(out_.good(), "cannot open metrics file \"{}\" for writing", path);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace ndt
