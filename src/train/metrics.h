// Metrics file: one JSON object per line (JSONL), flushed as written so a crashed or
// running job can be read.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace ndt {

class MetricsLog {
 public:
  // Creates the folder if needed; an empty path disables the log.
  // append: keep the records already there (a resumed run).
  explicit MetricsLog(const std::string& path, bool append = false);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace ndt
