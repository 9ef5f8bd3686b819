// Encoding equals the npm reference implementations' ids exactly (transformers.js's
// tokenizers as @lenml/tokenizers, gpt-3-encoder, tiktoken's WASM build), run under
// Node.js by the test, on fortunes and an edge-stressing corpus, for GPT-2 (encoder.json
// + vocab.bpe, the same as a tokenizer.json, and as a tiktoken file) and Llama 3
// (tokenizer.json; and with a BOS template); decode(encode(x)) == x for every document.
#include "reference.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ndt::testing {
namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> docs = edge_documents();
  const std::vector<std::string> fortunes = fortune_documents(300 * 1000);
  docs.insert(docs.end(), fortunes.begin(), fortunes.end());
  return docs;
}

bool valid_utf8(const std::string& s) { return tok::valid_utf8_prefix(s, 0) == s.size(); }

void expect_same_ids(const tok::Tokenizer& t, const std::vector<std::string>& docs,
                     const std::vector<std::vector<int32_t>>& expected, const std::string& what) {
  ASSERT_EQ(expected.size(), docs.size());
  tok::TokenEncoder encoder(t);
  int mismatches = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<int32_t> ids;
    encoder.encode(docs[i], ids);
    if (ids != expected[i] && ++mismatches <= 3) {
      ADD_FAILURE() << what << ": document " << i << " \"" << docs[i].substr(0, 120) << "\"\n  ndtrain:   "
                    << fmt::format("{}", fmt::join(ids, " ")).substr(0, 400) << "\n  reference: "
                    << fmt::format("{}", fmt::join(expected[i], " ")).substr(0, 400);
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": documents whose ids differ from the reference's";
}

void expect_round_trip(const tok::Tokenizer& t, const std::vector<std::string>& docs) {
  tok::TokenEncoder encoder(t);
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<int32_t> ids;
    encoder.encode(docs[i], ids, {.added_tokens = true, .post_process = false});
    ASSERT_EQ(t.decode(ids), docs[i]) << "document " << i;
  }
}

TEST(Reference, Gpt2FilesMatchTransformersJsAndGpt3Encoder) {
  TempDir dir;
  const std::vector<std::string> docs = corpus();
  const tok::Tokenizer t = tok::load_tokenizer(gpt2_encoder_json());
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.eos_id(), 50256);
  expect_same_ids(t, docs, reference_ids("gpt2", docs, dir), "GPT-2 vs @lenml/tokenizers");
  // gpt-3-encoder knows neither special tokens nor invalid UTF-8: the other documents.
  std::vector<std::string> plain;
  for (const std::string& d : docs) {
    if (valid_utf8(d) && d.find("<|endoftext|>") == std::string::npos) plain.push_back(d);
  }
  expect_same_ids(t, plain, reference_ids("gpt3-encoder", plain, dir), "GPT-2 vs gpt-3-encoder");
  expect_round_trip(t, docs);
}

TEST(Reference, Gpt2TokenizerJsonAndTiktokenFileEncodeAlike) {
  TempDir dir;
  const std::string json = dir.file("gpt2-tokenizer.json"), ranks = dir.file("gpt2.tiktoken");
  const std::string script = std::string(NDT_SOURCE_DIR) + "/bench/tokenizers/reference.cjs";
  ASSERT_EQ(run_command("node " + script + " write-json gpt2 " + json).exit_code, 0);
  ASSERT_EQ(run_command("node " + script + " write-tiktoken " + ranks).exit_code, 0);
  const tok::Tokenizer from_files = tok::load_tokenizer(gpt2_encoder_json());
  const tok::Tokenizer from_json = tok::load_tokenizer(json);
  const tok::Tokenizer from_ranks = tok::load_tokenizer(ranks);
  EXPECT_EQ(from_json.kind(), "tokenizer.json");
  EXPECT_EQ(from_ranks.kind(), "tiktoken r50k_base (GPT-2)");
  std::vector<std::string> docs = corpus(), valid;
  for (const std::string& d : docs) {
    if (valid_utf8(d)) valid.push_back(d);
  }
  // npm tiktoken (WASM) on GPT-2's ranks: strings only, so valid UTF-8.
  expect_same_ids(from_ranks, valid, reference_ids("tiktoken-gpt2", valid, dir), "tiktoken file vs npm tiktoken");
  tok::TokenEncoder a(from_files), b(from_json), c(from_ranks);
  for (const std::string& d : docs) {
    std::vector<int32_t> x, y, z;
    a.encode(d, x), b.encode(d, y), c.encode(d, z);
    ASSERT_EQ(x, y) << d.substr(0, 100);
    ASSERT_EQ(x, z) << d.substr(0, 100);
  }
}

TEST(Reference, Llama3TokenizerJsonMatchesTransformersJs) {
  TempDir dir;
  const std::vector<std::string> docs = corpus();
  const tok::Tokenizer t = tok::load_tokenizer(llama3_tokenizer_json());
  EXPECT_EQ(t.vocab_size(), 128256);
  EXPECT_EQ(t.eos_id(), 128001);
  EXPECT_EQ(t.bos_id(), 128000);
  expect_same_ids(t, docs, reference_ids("llama3", docs, dir), "Llama 3 vs @lenml/tokenizers");
  expect_round_trip(t, docs);
}

TEST(Reference, TemplatePostProcessorAddsTheBos) {
  TempDir dir;
  const std::string json = dir.file("llama3-bos.json");
  ASSERT_EQ(run_command("node " + std::string(NDT_SOURCE_DIR) + "/bench/tokenizers/reference.cjs write-json llama3-bos " +
                        json).exit_code, 0);
  const tok::Tokenizer t = tok::load_tokenizer(json);
  EXPECT_EQ(t.template_prefix(), std::vector<int32_t>{128000});
  std::vector<std::string> docs;
  for (const std::string& d : edge_documents()) {
    if (valid_utf8(d)) docs.push_back(d);
  }
  expect_same_ids(t, docs, reference_ids("llama3-bos", docs, dir), "Llama 3 with a BOS template");
  EXPECT_EQ(t.encode("hi", {.added_tokens = true, .post_process = false}), t.encode("hi").size() == 2
                ? std::vector<int32_t>{t.encode("hi")[1]} : std::vector<int32_t>{});
}

}  // namespace
}  // namespace ndt::testing
