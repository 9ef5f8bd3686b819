// Loss masks (data/loss_mask.h): the file beside a shard round-trips; the loader masks
// target t of a row with the byte of token t + 1 (kIgnoredTarget where it is 0) and
// counts the targets that count over the whole batch, eval windows included; and every
// bad mask is refused naming the file: one whose length is not its shard's (naming both),
// a missing mask when masks are asked for (naming data.loss_mask), a corrupt byte (the
// checksum), a byte other than 0 or 1, bad magic, a truncated file. Rows packed from whole
// documents (data/packed_rows.h) hold whole documents, then padding that never counts.
#include "core/error.h"
#include "core/targets.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/loss_mask.h"
#include "data/packed_rows.h"
#include "data/run_data.h"
#include "data/shard.h"
#include "../common/errors.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

namespace ndt {
namespace {

using testing::expect_error;
using testing::TempDir;

// 40 tokens 100..139; the mask is 1 on tokens whose index is in [5, 12) or [20, 33).
std::vector<uint16_t> tokens() {
  std::vector<uint16_t> t(40);
  std::iota(t.begin(), t.end(), uint16_t{100});
  return t;
}
std::vector<uint8_t> mask() {
  std::vector<uint8_t> m(40, 0);
  for (int i = 0; i < 40; ++i) m[size_t(i)] = (i >= 5 && i < 12) || (i >= 20 && i < 33);
  return m;
}

std::string write_masked_shard(const TempDir& dir) {
  const std::string shard = dir.file("train_000000.bin");
  write_shard(shard, tokens());
  write_mask(mask_path(shard), mask());
  return shard;
}

TEST(LossMask, PathIsBesideTheShardAndOutsideItsGlob) {
  EXPECT_EQ(mask_path("data/train_000001.bin"), "data/train_000001.mask");
  EXPECT_EQ(mask_path("data/tokens"), "data/tokens.mask");
}

// Catches: targets masked by the byte of their input token (off by one), a mask read
// from the start of the shard instead of the row's window, counts over this rank's rows only.
TEST(LossMask, LoaderMasksTargetsByTheByteOfTheirToken) {
  TempDir dir;
  const std::string shard = write_masked_shard(dir);
  const TokenDataset data({shard}, /*with_masks=*/true);
  ASSERT_TRUE(data.has_masks());
  const int B = 3, T = 8;
  const BatchLoader loader(data, B, T, 5);
  const std::vector<uint8_t> m = mask();
  for (int64_t step = 0; step < 4; ++step) {
    std::vector<int32_t> inputs(B * T), targets(B * T);
    loader.train_batch(step, 0, B, inputs.data(), targets.data());
    int64_t counted = 0;
    for (int i = 0; i < B * T; ++i) {
      const int32_t token = inputs[size_t(i)] + 1;  // tokens are consecutive: target = input + 1
      const bool counts = m[size_t(token - 100)] == 1;
      EXPECT_EQ(targets[size_t(i)], counts ? token : kIgnoredTarget) << "step " << step << " position " << i;
      counted += counts;
    }
    EXPECT_EQ(loader.train_targets(step), counted) << "step " << step;
  }
  std::vector<int32_t> inputs(B * T), targets(B * T);
  loader.eval_batch(1, 0, B, inputs.data(), targets.data());
  int64_t counted = 0;
  for (int i = 0; i < B * T; ++i) counted += targets[size_t(i)] != kIgnoredTarget;
  EXPECT_EQ(loader.eval_targets(1), counted);
  // Without masks every target counts and none is ignored.
  const TokenDataset plain({shard});
  const BatchLoader unmasked(plain, B, T, 5);
  unmasked.train_batch(0, 0, B, inputs.data(), targets.data());
  for (int32_t t : targets) EXPECT_NE(t, kIgnoredTarget);
  EXPECT_EQ(unmasked.train_targets(0), B * T);
}

TEST(LossMask, RunDataLoadsMasksOnlyWhenAsked) {
  TempDir dir;
  const std::string shard = write_masked_shard(dir);
  const RunData masked({shard, "", "", "", true}, 2, 8, 1);
  EXPECT_LT(masked.train().train_targets(0), 16);
  const RunData unmasked({shard, "", "", "", false}, 2, 8, 1);
  EXPECT_EQ(unmasked.train().train_targets(0), 16);
}

TEST(LossMask, ARunAskingForMasksWhereTheDatasetHasNoneIsRefused) {
  TempDir dir;
  write_shard(dir.file("plain.bin"), tokens());
  expect_error([&] { RunData({dir.file("plain.bin"), "", "", "", true}, 2, 8, 1); },
               {"loss mask", "plain.mask", "plain.bin", "does not exist", "data.loss_mask = true",
                "--format chat"});
}

TEST(LossMask, LengthOtherThanTheShardsIsRefusedNamingBoth) {
  TempDir dir;
  const std::string shard = write_masked_shard(dir);
  write_mask(mask_path(shard), std::vector<uint8_t>(39, 1));
  expect_error([&] { TokenDataset({shard}, true); },
               {"train_000000.mask holds 39 bytes", "train_000000.bin holds 40 tokens", "one byte per token"});
}

void overwrite_byte(const std::string& path, size_t offset, char value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(value);
}

TEST(LossMask, CorruptOrMalformedMasksAreRefused) {
  TempDir dir;
  const std::string shard = write_masked_shard(dir), path = mask_path(shard);
  // A flipped byte that is still 0 or 1: only the checksum sees it.
  overwrite_byte(path, kShardHeaderBytes + 2, 1);
  expect_error([&] { TokenDataset({shard}, true); }, {"train_000000.mask", "fails its checksum"});
  write_mask(path, mask());
  overwrite_byte(path, kShardHeaderBytes + 3, 7);
  expect_error([&] { TokenDataset({shard}, true); }, {"train_000000.mask", "byte 3 is 7, not 0 or 1"});
  overwrite_byte(path, 0, 1);
  expect_error([&] { TokenDataset({shard}, true); }, {"train_000000.mask", "bad magic"});
  write_mask(path, mask());
  std::filesystem::resize_file(path, kShardHeaderBytes + 20);
  expect_error([&] { TokenDataset({shard}, true); }, {"train_000000.mask", "40 bytes of mask", "holds 20", "truncated"});
  std::filesystem::resize_file(path, 100);
  expect_error([&] { TokenDataset({shard}, true); }, {"train_000000.mask", "truncated", "shorter than the"});
  expect_error([&] { write_mask(path, {0, 1, 2}); }, {"train_000000.mask", "byte 2 is 2, not 0 or 1"});
}

// Documents (each after separator 255) of 5, 9, 3, 20, 7 and 4 tokens, the separator
// included; the mask 1 on each document's tokens after its second.
struct Documents {
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> starts;
};
Documents documents() {
  Documents d;
  int id = 0;
  for (int length : {5, 9, 3, 20, 7, 4}) {
    d.starts.push_back(static_cast<int64_t>(d.tokens.size()));
    for (int i = 0; i < length; ++i) {
      d.tokens.push_back(i == 0 ? 255 : static_cast<uint16_t>(10 * id + i % 10));
      d.mask.push_back(i >= 2);
    }
    ++id;
  }
  return d;
}

// Catches: a row that splits a document it could hold whole (or drops one that fits
// exactly), padding whose targets count, a long document not cut to the row.
TEST(PackedRows, RowsHoldWholeDocumentsThenUncountedPadding) {
  TempDir dir;
  const Documents docs = documents();
  write_shard(dir.file("d.bin"), docs.tokens);
  write_mask(mask_path(dir.file("d.bin")), docs.mask);
  const TokenDataset data({dir.file("d.bin")}, true);
  const int T = 16;
  const DocumentIndex index(data, 255, T);
  ASSERT_EQ(index.count(), 6);
  EXPECT_EQ(index.too_long(), 1);  // the 20-token document
  std::vector<int32_t> tokens(T + 1);
  std::vector<uint8_t> mask(T + 1);
  const auto expect_row = [&](int64_t d, int64_t begin, int64_t whole, const char* what) {
    index.fill(d, tokens.data(), mask.data());
    for (int64_t i = 0; i < T + 1; ++i) {
      const bool padding = i >= whole;
      EXPECT_EQ(tokens[size_t(i)], padding ? 255 : docs.tokens[size_t(begin + i)]) << what << " token " << i;
      EXPECT_EQ(mask[size_t(i)], padding ? 0 : docs.mask[size_t(begin + i)]) << what << " mask " << i;
    }
  };
  expect_row(0, 0, 17, "documents 0, 1, 2 fill the row exactly");
  expect_row(1, 5, 12, "documents 1, 2: the next (20 tokens) does not fit");
  expect_row(3, 17, 17, "document 3 cut to the row");
  expect_row(4, 37, 11, "documents 4, 5, then padding to the end");
  // The loader: packed rows, their targets masked, the counts from the same rows.
  BatchLoader loader(data, 2, T, 3);
  loader.pack_documents(255);
  EXPECT_EQ(loader.documents(), 6);
  std::vector<int32_t> inputs(2 * T), targets(2 * T);
  for (int64_t step = 0; step < 5; ++step) {
    loader.train_batch(step, 0, 2, inputs.data(), targets.data());
    EXPECT_EQ(inputs[0], 255) << "a packed row starts at a document";
    EXPECT_EQ(inputs[size_t(T)], 255);
    int64_t counted = 0;
    for (int32_t t : targets) counted += t != kIgnoredTarget;
    EXPECT_EQ(loader.train_targets(step), counted);
  }
  // Packing needs masks (its padding must not count).
  const TokenDataset plain({dir.file("d.bin")});
  BatchLoader unmasked(plain, 2, T, 3);
  expect_error([&] { unmasked.pack_documents(255); }, {"need loss masks", "d.bin"});
}

}  // namespace
}  // namespace ndt
