#include "data/prepare_source.h"

#include "core/error.h"

namespace ndt {

PrepareSource::PrepareSource(const std::vector<std::string>& files, const TokenPrepareOptions& o,
                             const tok::Tokenizer& tokenizer)
    : special_in_text_(o.special_in_text) {
  if (o.format == "text") {
    documents_ = std::make_unique<DocumentReader>(files, o.documents, o.jsonl_field);
    return;
  }
  conversations_ = std::make_unique<ConversationReader>(files, o.format);
  chat_template_ = std::make_unique<ChatTemplate>(o.chat_template, tokenizer, o.tokenizer);
}

std::string PrepareSource::describe_template() const {
  return chat_template_ ? chat_template_->describe() : "";
}

bool PrepareSource::next(PrepareUnit& unit, size_t& bytes) {
  if (documents_) {
    if (!documents_->next(unit.text)) return false;
    bytes = unit.text.size();
    return true;
  }
  if (!conversations_->next(unit.conversation)) return false;
  chat_template_->check(unit.conversation);
  bytes = 0;
  for (const ChatMessage& m : unit.conversation.messages) bytes += m.content.size();
  return true;
}

void PrepareSource::encode(const PrepareUnit& unit, tok::TokenEncoder& encoder, std::vector<int32_t>& ids,
                           std::vector<uint8_t>& mask) const {
  ids.clear();
  mask.clear();
  if (chat_template_) {
    chat_template_->render(unit.conversation, encoder, special_in_text_, ids, mask);
    return;
  }
  encoder.encode(unit.text, ids, tok::EncodeOptions{.added_tokens = special_in_text_, .post_process = false});
}

}  // namespace ndt
