// Conversations from JSONL for `ndtrain prepare --format chat|prompt-response`, one per
// line (blank lines skipped):
//   chat             {"messages": [{"role": "user", "content": "..."}, ...]}
//   prompt-response  {"prompt": "...", "response": "..."}: a user turn and an assistant turn
// Other fields are ignored. Errors name the file and the line: not JSON, not an object, a
// missing or non-string field, an empty message list.
#pragma once

#include "data/chat_template.h"
#include "data/documents.h"

#include <string>
#include <vector>

namespace ndt {

class ConversationReader {
 public:
  // format: chat or prompt-response (throws naming --format otherwise).
  ConversationReader(std::vector<std::string> files, std::string format);
  bool next(Conversation& conversation);  // false after the last line of the last file
  int64_t bytes_read() const { return lines_.bytes_read(); }

 private:
  DocumentReader lines_;
  std::string format_;
};

}  // namespace ndt
