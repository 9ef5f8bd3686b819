#include "data/chat_template.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

namespace fs = std::filesystem;

namespace ndt {

namespace {

const std::vector<std::string> kRoles = {"system", "user", "assistant"};

fs::path config_file(const std::string& tokenizer_path) {
  const fs::path p(tokenizer_path);
  return (fs::is_directory(p) ? p : p.parent_path()) / "tokenizer_config.json";
}

// The folder's chat_template text (a string, or the "default" entry of a list of named
// templates); nullopt when the file or the key is absent.
std::optional<std::string> folder_template(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  std::ifstream in(file);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{} is not JSON: {}", file.string(), e.what());
  }
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const nlohmann::json& t = config.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  for (const nlohmann::json& entry : t.is_array() ? t : nlohmann::json::array()) {
    if (entry.value("name", "") == "default" && entry.contains("template")) return entry.at("template").get<std::string>();
  }
  return std::nullopt;
}

// The form a template's markers show: "llama3", "chatml", or "" for none known.
std::string recognise(const std::string& text) {
  const auto has = [&](const char* marker) { return text.find(marker) != std::string::npos; };
  if (has("<|start_header_id|>") && has("<|end_header_id|>") && has("<|eot_id|>")) return "llama3";
  if (has("<|im_start|>") && has("<|im_end|>")) return "chatml";
  return "";
}

void trim(std::string_view& s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& name, const tok::Tokenizer& tokenizer, const std::string& tokenizer_path) {
  if (name == "default" || name == "chatml" || name == "llama3") {
    source_ = "--chat-template " + name;
    use(name, tokenizer, /*require_markers=*/name != "default");
    return;
  }
  NDT_CHECK(name == "auto" || name == "tokenizer",
            "--chat-template {} is not a template: auto, tokenizer, default, chatml or llama3", name);
  const fs::path file = config_file(tokenizer_path);
  const std::optional<std::string> text = folder_template(file);
  const std::string form = text ? recognise(*text) : "";
  if (name == "tokenizer") {
    NDT_CHECK(text.has_value(), "--chat-template tokenizer: {} holds no chat_template", file.string());
    NDT_CHECK(!form.empty(), "--chat-template tokenizer: the chat_template of {} is not a known form (ChatML's "
              "<|im_start|>/<|im_end|> or Llama 3's <|start_header_id|>/<|eot_id|>): give --chat-template default, "
              "chatml or llama3", file.string());
  }
  source_ = form.empty() ? (text ? "the chat_template of " + file.string() + " is not a known form"
                                 : "no chat_template in " + file.string())
                         : "the chat_template of " + file.string();
  use(form.empty() ? "default" : form, tokenizer, /*require_markers=*/!form.empty());
}

void ChatTemplate::use(const std::string& form, const tok::Tokenizer& tokenizer, bool require_markers) {
  form_ = form;
  if (form == "llama3") {
    begin_ = "<|begin_of_text|>", header_open_ = "<|start_header_id|>", header_close_ = "<|end_header_id|>\n\n";
    end_of_turn_ = "<|eot_id|>", after_turn_ = "", trim_ = true;
  } else {
    begin_ = "", header_open_ = "<|im_start|>", header_close_ = "\n";
    end_of_turn_ = "<|im_end|>", after_turn_ = "\n", trim_ = false;
  }
  if (!require_markers) return;
  const std::vector<std::string> markers =
      form == "llama3" ? std::vector<std::string>{begin_, header_open_, "<|end_header_id|>", end_of_turn_}
                       : std::vector<std::string>{header_open_, end_of_turn_};
  for (const std::string& marker : markers) {
    NDT_CHECK(tokenizer.token_id(marker).has_value(), "chat template {} ({}): the tokenizer has no token {}", form,
              source_, marker);
  }
}

std::string ChatTemplate::describe() const { return form_ + " (" + source_ + ")"; }

void ChatTemplate::check(const Conversation& c) const {
  for (const ChatMessage& m : c.messages) {
    NDT_CHECK(std::find(kRoles.begin(), kRoles.end(), m.role) != kRoles.end(),
              "{}: role \"{}\" is not one the {} chat template knows (system, user, assistant)", c.where, m.role,
              form_);
  }
}

void ChatTemplate::render(const Conversation& c, tok::TokenEncoder& encoder, bool special_in_text,
                          std::vector<int32_t>& ids, std::vector<uint8_t>& mask) const {
  const tok::EncodeOptions markers{.added_tokens = true, .post_process = false};
  const tok::EncodeOptions text{.added_tokens = special_in_text, .post_process = false};
  const auto piece = [&](std::string_view s, const tok::EncodeOptions& options, bool counted) {
    encoder.encode(s, ids, options);
    mask.resize(ids.size(), counted ? 1 : 0);
  };
  piece(begin_, markers, false);
  for (const ChatMessage& m : c.messages) {
    const bool assistant = m.role == "assistant";
    piece(header_open_ + m.role + header_close_, markers, false);
    std::string_view content = m.content;
    if (trim_) trim(content);
    piece(content, text, assistant);
    piece(end_of_turn_, markers, assistant);
    piece(after_turn_, markers, false);
  }
}

}  // namespace ndt
