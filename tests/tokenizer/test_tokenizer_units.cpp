// The pieces under the reference tests: the byte-level alphabet, SHA-256, the heap merge
// loop of long words against a plain one, decode of tokens that split a UTF-8 character,
// ordinary text (special tokens not recognised), and every bad file refused by name.
#include "../common/errors.h"
#include "reference.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/sha256.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <random>

namespace ndt::testing {
namespace {

TEST(ByteLevel, EveryByteRoundTripsAndPrintableAsciiStandsForItself) {
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(tok::byte_level_decode(tok::byte_level_encode(one)), one);
  }
  EXPECT_EQ(tok::byte_level_encode("a!~"), "a!~");
  EXPECT_EQ(tok::byte_level_encode(" "), "\xc4\xa0");  // U+0120 'Ġ'
  EXPECT_FALSE(tok::byte_level_decode("\xe2\x82\xac").has_value());  // '€' is not in the alphabet
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(tok::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(tok::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(tok::sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Bpe, HeapAndScanMergeLoopsAgree) {
  // encode_word scans words up to 128 bytes and keeps longer ones' pairs in a heap: both
  // loops must give the same ids, on GPT-2's merges (ranks) and Llama 3's.
  for (const std::string& file : {gpt2_encoder_json(), llama3_tokenizer_json()}) {
    const tok::Tokenizer t = tok::load_tokenizer(file);
    std::mt19937 rng(7);
    const std::string alphabet = "abcdeeeefghij  ,.!1";
    for (int trial = 0; trial < 300; ++trial) {
      const int n = 2 + static_cast<int>(rng() % 127);
      std::vector<int32_t> scan, heap;
      std::string word;
      for (int i = 0; i < n; ++i) word += alphabet[rng() % alphabet.size()];
      for (char c : word) scan.push_back(t.bpe().byte_id(static_cast<uint8_t>(c)));
      heap = scan;
      t.bpe().merge_by_scan(scan);
      t.bpe().merge_by_heap(heap);
      ASSERT_EQ(scan, heap) << word;
      EXPECT_EQ(t.decode(heap), word);
    }
  }
}

TEST(Decode, TokensSplittingACharacterDecodeToItsBytes) {
  const tok::Tokenizer t = tok::load_tokenizer(gpt2_encoder_json());
  const std::string text = "\xf0\x9f\xa6\x80";  // U+1F980, four bytes over several tokens
  const std::vector<int32_t> ids = t.encode(text);
  ASSERT_GT(ids.size(), 1u);
  std::string joined;
  for (int32_t id : ids) joined += t.decode(std::vector<int32_t>{id});
  EXPECT_EQ(joined, text);
  EXPECT_NE(t.decode(std::vector<int32_t>{ids[0]}), text);
  expect_error([&] { t.decode(std::vector<int32_t>{50257}); }, {"token id 50257", "[0, 50257)"});
}

TEST(Encode, OrdinaryTextKeepsSpecialTokensAsText) {
  const tok::Tokenizer t = tok::load_tokenizer(gpt2_encoder_json());
  const std::vector<int32_t> special = t.encode("a<|endoftext|>b");
  EXPECT_EQ(special.size(), 3u);
  EXPECT_EQ(special[1], 50256);
  const std::vector<int32_t> ordinary = t.encode("a<|endoftext|>b", {.added_tokens = false, .post_process = false});
  EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), 50256), 0);
  EXPECT_EQ(t.decode(ordinary), "a<|endoftext|>b");
}

// A byte-level tokenizer.json of the 256 byte tokens plus "ab", editable by each test.
nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"post_processor", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}}};
}

std::string write_json(const TempDir& dir, const nlohmann::json& j) {
  const std::string path = dir.file("tokenizer.json");
  std::ofstream(path) << j.dump();
  return path;
}

TEST(TokenizerErrors, EveryBadFileIsRefusedByNameBeforeAnyText) {
  TempDir dir;
  EXPECT_EQ(tok::load_tokenizer(write_json(dir, tiny_tokenizer_json())).encode("abab"),
            (std::vector<int32_t>{256, 256}));
  const std::string path = dir.file("tokenizer.json");
  write_bytes(path, "{\"model\": {\"type\": \"BPE\", ");
  expect_error([&] { tok::load_tokenizer(path); }, {path, "not valid JSON"});
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& parts) {
    nlohmann::json j = tiny_tokenizer_json();
    edit(j);
    const std::string p = write_json(dir, j);
    std::vector<std::string> all = parts;
    all.push_back(p);
    expect_error([&] { tok::load_tokenizer(p); }, all);
  };
  refused([](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }, {"model type \"WordPiece\" is not supported"});
  refused([](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }, {"model type \"Unigram\""});
  refused([](nlohmann::json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer type \"NFC\""});
  refused([](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, {"pre-tokenizer type \"Metaspace\""});
  refused([](nlohmann::json& j) { j["pre_tokenizer"] = nullptr; }, {"no ByteLevel pre-tokenizer"});
  refused([](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder type \"WordPiece\""});
  refused([](nlohmann::json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, {"post-processor type \"BertProcessing\""});
  refused([](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }, {"byte_fallback"});
  refused([](nlohmann::json& j) { j["model"]["merges"] = {"a zq"}; }, {"merge 0 \"a zq\" names token \"zq\"", "not in the vocabulary"});
  refused([](nlohmann::json& j) { j["model"]["vocab"].erase("a"), j["model"]["merges"] = nlohmann::json::array(); }, {"no token for byte 0x61"});
  refused([](nlohmann::json& j) { j["model"]["vocab"] = 3; }, {"model.vocab is not an object"});
  refused([](nlohmann::json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  }, {"does not compile"});
  refused([](nlohmann::json& j) {
    j["added_tokens"] = {{{"id", 257}, {"content", "<x>"}, {"lstrip", true}, {"special", true}}};
  }, {"added token \"<x>\" has lstrip = true"});
  write_bytes(dir.file("odd.tiktoken"), "YQ== 0\nYg== 1\n");
  expect_error([&] { tok::load_tokenizer(dir.file("odd.tiktoken")); }, {"odd.tiktoken", "holds 2 ranks"});
  write_bytes(dir.file("bad.tiktoken"), "not base64!! x\n");
  expect_error([&] { tok::load_tokenizer(dir.file("bad.tiktoken")); }, {"bad.tiktoken line 1"});
  write_bytes(dir.file("enc/encoder.json"), "{\"a\": 0}");
  expect_error([&] { tok::load_tokenizer(dir.file("enc/encoder.json")); }, {"no vocab.bpe beside it"});
  expect_error([&] { tok::load_tokenizer(dir.file("missing.json")); }, {"missing.json", "does not exist"});
}

TEST(TokenizerErrors, Gpt2MergeNamingAMissingTokenNamesTheLine) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "g");
  std::filesystem::copy_file(gpt2_encoder_json(), dir.path() / "g/encoder.json");
  write_bytes(dir.file("g/vocab.bpe"), "#version: 0.2\nĠ t\nqqqqqq zzzzzzzz\n");
  expect_error([&] { tok::load_tokenizer(dir.file("g/encoder.json")); },
               {"vocab.bpe line 3", "names token \"qqqqqq\""});
}

}  // namespace
}  // namespace ndt::testing
