// Documents from text files for `ndtrain prepare --tokenizer`, read one at a time: a
// whole file each ("file"), a line each ("line", without its newline; empty lines are
// empty documents), or a JSONL field each ("jsonl": one JSON object per line, the
// string field named). Errors name the file and the line.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ndt {

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, std::string mode, std::string jsonl_field);
  bool next(std::string& document);  // false at the end of the last file
  int64_t bytes_read() const { return bytes_; }
  // "input file F line N" of the document next() last returned (line modes), for messages.
  std::string where() const;

 private:
  bool open_next();
  std::vector<std::string> files_;
  std::string mode_, field_;
  size_t file_ = 0;
  int64_t line_ = 0, bytes_ = 0;
  std::ifstream in_;
  bool open_ = false;
};

}  // namespace ndt
