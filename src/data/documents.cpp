#include "data/documents.h"

#include "core/error.h"
#include "core/input_file.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace ndt {

DocumentReader::DocumentReader(std::vector<std::string> files, std::string mode, std::string jsonl_field)
    : files_(std::move(files)), mode_(std::move(mode)), field_(std::move(jsonl_field)) {
  NDT_CHECK(mode_ == "file" || mode_ == "line" || mode_ == "jsonl",
            "prepare --documents {} is not a way to cut documents: file, line or jsonl", mode_);
  for (const std::string& f : files_) {
    const std::string problem = input_file_problem(f);
    NDT_CHECK(problem.empty(), "input file {} {}", f, problem);
  }
}

std::string DocumentReader::where() const { return fmt::format("input file {} line {}", files_[file_], line_); }

bool DocumentReader::open_next() {
  if (file_ >= files_.size()) return false;
  in_ = std::ifstream(files_[file_], std::ios::binary);
  NDT_CHECK(in_.good(), "cannot open input file {}", files_[file_]);
  line_ = 0;
  open_ = true;
  return true;
}

bool DocumentReader::next(std::string& document) {
  while (true) {
    if (!open_ && !open_next()) return false;
    if (mode_ == "file") {
      std::stringstream text;
      text << in_.rdbuf();
      document = text.str();
      bytes_ += static_cast<int64_t>(document.size());
      open_ = false, ++file_;
      return true;
    }
    if (!std::getline(in_, document)) {
      open_ = false, ++file_;
      continue;
    }
    ++line_;
    bytes_ += static_cast<int64_t>(document.size()) + 1;
    if (mode_ == "line") return true;
    if (document.empty()) continue;  // a blank line in JSONL is no document
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(document);
    } catch (const nlohmann::json::parse_error& e) {
      fail("{} is not JSON: {}", where(), e.what());
    }
    NDT_CHECK(j.is_object() && j.contains(field_) && j[field_].is_string(),
              "{}: no string field \"{}\" (--jsonl-field)", where(), field_);
    document = j[field_].get<std::string>();
    return true;
  }
}

}  // namespace ndt
