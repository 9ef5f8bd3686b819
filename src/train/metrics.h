// Metrics file: one JSON object per line (JSONL), each record one write(2) as it is
// made, so a crashed or running job can be read. A failed write (disk full, I/O error)
// throws ndt::Error naming the file and the reason: a run never goes on, or exits 0,
// with records silently missing or cut.
#pragma once

#include "core/output_file.h"

#include <nlohmann/json.hpp>

#include <memory>
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
  std::unique_ptr<AppendFile> out_;
};

}  // namespace ndt
