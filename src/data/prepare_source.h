// What `ndtrain prepare --tokenizer` encodes, one unit at a time: a document's text
// (--format text: documents.h), or a conversation rendered by a chat template with its
// loss mask (--format chat | prompt-response: conversations.h, chat_template.h). Units
// are read in order on one thread and encoded on many.
#pragma once

#include "data/chat_template.h"
#include "data/conversations.h"
#include "data/documents.h"
#include "data/prepare_tokens.h"

#include <memory>
#include <string>
#include <vector>

namespace ndt {

struct PrepareUnit {
  std::string text;           // --format text
  Conversation conversation;  // the chat formats
};

class PrepareSource {
 public:
  // Throws naming the option at fault (--format, --chat-template, --documents).
  PrepareSource(const std::vector<std::string>& files, const TokenPrepareOptions& options,
                const tok::Tokenizer& tokenizer);
  bool masked() const { return chat_template_ != nullptr; }
  std::string describe_template() const;  // "" for text
  // The next unit (false after the last), with its size in bytes of text; a
  // conversation's roles are checked here, on the reading thread.
  bool next(PrepareUnit& unit, size_t& bytes);
  // Appends the unit's ids (and, when masked(), one mask byte each). Thread-safe with one
  // encoder per thread.
  void encode(const PrepareUnit& unit, tok::TokenEncoder& encoder, std::vector<int32_t>& ids,
              std::vector<uint8_t>& mask) const;
  int64_t bytes_read() const { return documents_ ? documents_->bytes_read() : conversations_->bytes_read(); }

 private:
  bool special_in_text_;
  std::unique_ptr<DocumentReader> documents_;
  std::unique_ptr<ConversationReader> conversations_;
  std::unique_ptr<ChatTemplate> chat_template_;
};

}  // namespace ndt
