#include "tokenizer/hf_tokenizer_json.h"

#include "core/error.h"
#include "core/input_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/known_patterns.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ndt::tok {

using nlohmann::json;

json read_json_file(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "tokenizer file {} {}", path, problem);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    fail("tokenizer file {} is not valid JSON (byte {}): {}", path, e.byte, e.what());
  }
}

namespace {

std::string type_of(const json& node) {
  return node.is_object() && node.contains("type") && node["type"].is_string() ? node["type"].get<std::string>()
                                                                                : std::string();
}

bool flag(const json& node, const char* key, bool fallback) {
  return node.contains(key) && node[key].is_boolean() ? node[key].get<bool>() : fallback;
}

// A literal string as a PCRE2 pattern.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void read_pre_tokenizer(const json& node, const std::string& path, TokenizerSpec& spec, bool& byte_level) {
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const json& child : node.at("pretokenizers")) read_pre_tokenizer(child, path, spec, byte_level);
  } else if (type == "ByteLevel") {
    byte_level = true;
    PreTokenizerStage stage{"ByteLevel", flag(node, "add_prefix_space", false), nullptr};
    if (flag(node, "use_regex", true)) stage.split = std::make_shared<Regex>(kGpt2Pattern, path);
    spec.stages.push_back(std::move(stage));
  } else if (type == "Split") {
    const std::string behavior = node.value("behavior", std::string());
    NDT_CHECK(behavior == "Isolated", "tokenizer {}: pre-tokenizer Split with behavior \"{}\" is not supported (only "
              "Isolated)", path, behavior);
    NDT_CHECK(!flag(node, "invert", false), "tokenizer {}: pre-tokenizer Split with invert = true is not supported", path);
    const json& pattern = node.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) regex = pattern["Regex"].get<std::string>();
    else if (pattern.contains("String")) regex = escape_literal(pattern["String"].get<std::string>());
    else fail("tokenizer {}: pre-tokenizer Split has a pattern that is neither Regex nor String", path);
    spec.stages.push_back({"Split", false, std::make_shared<Regex>(regex, path)});
  } else {
    fail("tokenizer {}: pre-tokenizer type \"{}\" is not supported (built: ByteLevel, Split, Sequence)", path,
         type.empty() ? node.dump() : type);
  }
}

void check_decoder(const json& node, const std::string& path) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const json& child : node.at("decoders")) check_decoder(child, path);
    return;
  }
  NDT_CHECK(type == "ByteLevel", "tokenizer {}: decoder type \"{}\" is not supported (built: ByteLevel)", path, type);
}

// TemplateProcessing's "single" template: the special tokens before and after $A.
void read_template(const json& node, const std::string& path, TokenizerSpec& spec) {
  bool after = false;
  for (const json& piece : node.at("single")) {
    if (piece.contains("Sequence")) {
      NDT_CHECK(piece["Sequence"].value("id", std::string()) == "A",
                "tokenizer {}: post-processor template piece {} is not supported (only $A)", path, piece.dump());
      after = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string name = piece["SpecialToken"].at("id").get<std::string>();
      const json& special = node.at("special_tokens");
      NDT_CHECK(special.contains(name), "tokenizer {}: post-processor template names special token \"{}\", which its "
                "special_tokens do not define", path, name);
      for (const json& id : special[name].at("ids")) (after ? spec.template_suffix : spec.template_prefix).push_back(id.get<int32_t>());
    } else {
      fail("tokenizer {}: post-processor template piece {} is not supported", path, piece.dump());
    }
  }
}

void read_post_processor(const json& node, const std::string& path, TokenizerSpec& spec) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const json& child : node.at("processors")) read_post_processor(child, path, spec);
  } else if (type == "TemplateProcessing") {
    read_template(node, path, spec);
  } else {
    NDT_CHECK(type == "ByteLevel", "tokenizer {}: post-processor type \"{}\" is not supported (built: ByteLevel, "
              "TemplateProcessing, Sequence)", path, type);
  }
}

void read_added_tokens(const json& root, const std::string& path, TokenizerSpec& spec) {
  if (!root.contains("added_tokens")) return;
  for (const json& a : root["added_tokens"]) {
    const std::string content = a.at("content").get<std::string>();
    for (const char* option : {"lstrip", "rstrip", "single_word"}) {
      NDT_CHECK(!flag(a, option, false), "tokenizer {}: added token \"{}\" has {} = true, which is not supported", path,
                content, option);
    }
    spec.added.push_back({content, a.at("id").get<int32_t>(), flag(a, "special", false)});
  }
}

void check_model_options(const json& model, const std::string& path) {
  const std::string type = model.contains("type") ? type_of(model) : (model.contains("merges") ? "BPE" : "");
  NDT_CHECK(type == "BPE", "tokenizer {}: model type \"{}\" is not supported (only byte-level BPE; not WordPiece, "
            "Unigram or WordLevel)", path, type.empty() ? "(none)" : type);
  NDT_CHECK(!model.contains("dropout") || model["dropout"].is_null() || model["dropout"].get<double>() == 0.0,
            "tokenizer {}: BPE dropout is not supported", path);
  NDT_CHECK(!flag(model, "byte_fallback", false), "tokenizer {}: BPE byte_fallback (SentencePiece-style BPE) is not "
            "supported, only byte-level BPE", path);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    NDT_CHECK(!model.contains(affix) || model[affix].is_null() || model[affix].get<std::string>().empty(),
              "tokenizer {}: BPE {} is not supported", path, affix);
  }
}

void read_vocab(const json& model, const std::string& path, TokenizerSpec& spec) {
  const json& vocab = model.at("vocab");
  NDT_CHECK(vocab.is_object(), "tokenizer {}: model.vocab is not an object of token -> id", path);
  int32_t max_id = -1;
  for (const auto& [text, id] : vocab.items()) max_id = std::max(max_id, id.get<int32_t>());
  for (const AddedToken& a : spec.added) max_id = std::max(max_id, a.id);
  spec.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [text, id_node] : vocab.items()) {
    const int32_t id = id_node.get<int32_t>();
    NDT_CHECK(id >= 0, "tokenizer {}: token \"{}\" has a negative id {}", path, text, id);
    std::optional<std::string> bytes = byte_level_decode(text);
    if (!bytes) {  // an added token kept in the vocabulary in plain text
      const bool added = std::any_of(spec.added.begin(), spec.added.end(), [&](const AddedToken& a) { return a.id == id; });
      NDT_CHECK(added, "tokenizer {}: vocabulary token \"{}\" (id {}) is not in the byte-level alphabet", path, text, id);
      continue;
    }
    spec.tokens[static_cast<size_t>(id)] = std::move(*bytes);
  }
}

void read_merges(const json& model, const std::string& path, TokenizerSpec& spec) {
  std::unordered_map<std::string, int32_t> ids;
  for (size_t id = 0; id < spec.tokens.size(); ++id) ids.emplace(spec.tokens[id], static_cast<int32_t>(id));
  const json& merges = model.at("merges");
  spec.merges.reserve(merges.size());
  const auto id_of = [&](const std::string& part, size_t rank, const std::string& merge) {
    const std::optional<std::string> bytes = byte_level_decode(part);
    const auto it = bytes ? ids.find(*bytes) : ids.end();
    NDT_CHECK(it != ids.end(), "tokenizer {}: merge {} \"{}\" names token \"{}\", which is not in the vocabulary", path,
              rank, merge, part);
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string left, right;
    const json& m = merges[rank];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      NDT_CHECK(space != std::string::npos, "tokenizer {}: merge {} \"{}\" is not two tokens separated by a space", path, rank, s);
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {
      NDT_CHECK(m.is_array() && m.size() == 2, "tokenizer {}: merge {} {} is not a pair of tokens", path, rank, m.dump());
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    }
    const std::string shown = left + " " + right;
    const int32_t l = id_of(left, rank, shown), r = id_of(right, rank, shown);
    id_of(left + right, rank, shown);
    spec.merges.emplace_back(l, r);
  }
}

// eos_token / bos_token of a tokenizer_config.json beside the file, if any.
std::string config_token(const std::string& path, const char* key) {
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(config)) return "";
  const json c = read_json_file(config.string());
  if (!c.contains(key)) return "";
  if (c[key].is_string()) return c[key].get<std::string>();
  if (c[key].is_object() && c[key].contains("content")) return c[key]["content"].get<std::string>();
  return "";
}

std::string first_present(const TokenizerSpec& spec, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    for (const AddedToken& a : spec.added) {
      if (a.content == n) return n;
    }
  }
  return "";
}

}  // namespace

TokenizerSpec read_hf_tokenizer_json(const json& root, const std::string& path) {
  TokenizerSpec spec;
  spec.kind = "tokenizer.json";
  spec.files = {path};
  NDT_CHECK(root.is_object() && root.contains("model"), "tokenizer file {} has no \"model\": not a Hugging Face "
            "tokenizer.json", path);
  try {
    const json& model = root["model"];
    check_model_options(model, path);
    const json normalizer = root.value("normalizer", json());
    NDT_CHECK(normalizer.is_null(), "tokenizer {}: normalizer type \"{}\" is not supported (only none)", path,
              type_of(normalizer));
    bool byte_level = false;
    if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) {
      read_pre_tokenizer(root["pre_tokenizer"], path, spec, byte_level);
    }
    NDT_CHECK(byte_level, "tokenizer {}: no ByteLevel pre-tokenizer, so this is not a byte-level BPE", path);
    check_decoder(root.value("decoder", json()), path);
    read_post_processor(root.value("post_processor", json()), path, spec);
    read_added_tokens(root, path, spec);
    spec.ignore_merges = flag(model, "ignore_merges", false);
    read_vocab(model, path, spec);
    read_merges(model, path, spec);
  } catch (const json::exception& e) {
    fail("tokenizer file {} is malformed: {}", path, e.what());
  }
  spec.eos = config_token(path, "eos_token");
  if (spec.eos.empty()) spec.eos = first_present(spec, {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
  spec.bos = config_token(path, "bos_token");
  if (spec.bos.empty()) spec.bos = first_present(spec, {"<|begin_of_text|>", "<s>", "<bos>"});
  return spec;
}

}  // namespace ndt::tok
