// Chat templates for `ndtrain prepare --format chat|prompt-response` (docs/data.md): a
// conversation to tokens and a loss mask, 1 on the tokens of each assistant turn's content
// and its end-of-turn token, 0 on system and user turns and on every header. Three forms,
// each recognised by its markers, never by running the tokenizer folder's Jinja:
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n                    (Qwen2 and others)
//   llama3   <|begin_of_text|> once, then
//            <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> (content trimmed)
//   default  ChatML's markers: special tokens when the tokenizer has them (one id each),
//            else plain text (GPT-2).
// Each piece (a header, a content, an end of turn) is encoded alone and the ids joined.
// Roles: system, user, assistant.
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

struct ChatMessage {
  std::string role, content;
};

struct Conversation {
  std::vector<ChatMessage> messages;
  std::string where;  // "input file F line N", for messages
};

class ChatTemplate {
 public:
  // name: "auto" (the tokenizer folder's tokenizer_config.json chat_template when it is a
  // known form, else default), "tokenizer" (that template; throws naming the file when it
  // is missing or not a known form), or "default", "chatml", "llama3" (the last two throw
  // naming the marker token the tokenizer lacks). tokenizer_path: the --tokenizer file or
  // folder. Throws naming --chat-template for any other name.
  ChatTemplate(const std::string& name, const tok::Tokenizer& tokenizer, const std::string& tokenizer_path);

  const std::string& form() const { return form_; }  // "chatml", "llama3" or "default"
  std::string describe() const;                       // the form and where it came from

  // Throws naming conversation.where, the role and the template for a role it does not
  // know. Call before render (which runs on encoding threads).
  void check(const Conversation& conversation) const;
  // Appends the conversation's tokens to ids and one mask byte per token to mask.
  // special_in_text: special tokens written in contents are special (else plain text).
  void render(const Conversation& conversation, tok::TokenEncoder& encoder, bool special_in_text,
              std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const;

 private:
  void use(const std::string& form, const tok::Tokenizer& tokenizer, bool require_markers);

  std::string form_, source_;
  std::string begin_;         // once, before the first turn
  std::string header_open_;   // before the role
  std::string header_close_;  // after the role
  std::string end_of_turn_;   // after the content: counted in assistant turns
  std::string after_turn_;    // after the end of turn: never counted
  bool trim_ = false;         // contents are stripped of surrounding whitespace
};

}  // namespace ndt
