#include "data/conversations.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

namespace ndt {

namespace {

std::string string_field(const nlohmann::json& object, const std::string& key, const std::string& where) {
  NDT_CHECK(object.contains(key), "{}: no field \"{}\"", where, key);
  NDT_CHECK(object.at(key).is_string(), "{}: field \"{}\" is {}, not a string", where, key,
            object.at(key).type_name());
  return object.at(key).get<std::string>();
}

std::vector<ChatMessage> chat_messages(const nlohmann::json& line, const std::string& where) {
  NDT_CHECK(line.contains("messages"), "{}: no field \"messages\" (--format chat)", where);
  const nlohmann::json& list = line.at("messages");
  NDT_CHECK(list.is_array() && !list.empty(), "{}: \"messages\" is {}, not a non-empty list of messages", where,
            list.is_array() ? "empty" : list.type_name());
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("{} message {}", where, i);
    NDT_CHECK(list[i].is_object(), "{}: a message is an object with \"role\" and \"content\", not {}", at,
              list[i].type_name());
    messages.push_back({string_field(list[i], "role", at), string_field(list[i], "content", at)});
  }
  return messages;
}

}  // namespace

ConversationReader::ConversationReader(std::vector<std::string> files, std::string format)
    : lines_(std::move(files), "line", ""), format_(std::move(format)) {
  NDT_CHECK(format_ == "chat" || format_ == "prompt-response",
            "prepare --format {} reads no conversations: chat or prompt-response", format_);
}

bool ConversationReader::next(Conversation& c) {
  std::string text;
  do {
    if (!lines_.next(text)) return false;
  } while (text.empty());
  c.where = lines_.where();
  nlohmann::json line;
  try {
    line = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{} is not JSON: {}", c.where, e.what());
  }
  NDT_CHECK(line.is_object(), "{} is {}, not a JSON object (--format {})", c.where, line.type_name(), format_);
  if (format_ == "chat") {
    c.messages = chat_messages(line, c.where);
  } else {
    c.messages = {{"user", string_field(line, "prompt", c.where)}, {"assistant", string_field(line, "response", c.where)}};
  }
  return true;
}

}  // namespace ndt
