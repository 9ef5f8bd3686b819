// llm.c checkpoints: save/load round trip with identical loss, the byte layout checked
// at the qkv weights by hand, vocab padding, version 5 (bf16) written and read (also a
// file made here from a version 3 one, as llm.c's exporter would), and the header errors.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "data/shard.h"
#include "interchange/llmc.h"
#include "support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace ndt {
namespace {

using testing::expect_error;

std::vector<float> floats_of(const std::string& bytes, size_t first_byte) {
  std::vector<float> out((bytes.size() - first_byte) / 4);
  std::memcpy(out.data(), bytes.data() + first_byte, out.size() * 4);
  return out;
}

std::vector<int32_t> header_of(const std::string& bytes) {
  std::vector<int32_t> h(kLlmcHeaderInts);
  std::memcpy(h.data(), bytes.data(), h.size() * 4);
  return h;
}

TEST(Llmc, RoundTripGivesIdenticalLoss) {
  testing::TempDir dir;
  const ModelConfig config = ModelConfig::preset("gpt2-tiny");
  Transformer model(config, /*seed=*/7);
  load_into(model, testing::perturbed_state(config));
  save_llmc(state_of(model), dir.file("gpt2.bin"));

  const ModelState back = load_llmc(dir.file("gpt2.bin"));
  testing::expect_same_state(state_of(model), back);
  Transformer imported(back.config, /*seed=*/99);
  load_into(imported, back);
  EXPECT_EQ(testing::loss_of(imported), testing::loss_of(model));
  Transformer fresh(back.config, /*seed=*/99);  // the loss does depend on the weights
  EXPECT_NE(testing::loss_of(fresh), testing::loss_of(model));
}

TEST(Llmc, LayoutMatchesLlmcOrderWithPaddedVocab) {
  testing::TempDir dir;
  ModelConfig config = ModelConfig::preset("gpt2-tiny");
  config.vocab_size = 250;
  const ModelState state = testing::perturbed_state(config);
  save_llmc(state, dir.file("a.bin"));
  EXPECT_EQ(header_of(testing::read_bytes(dir.file("a.bin")))[7], 256);  // default: multiple of 128

  save_llmc(state, dir.file("b.bin"), /*padded_vocab=*/384);
  const std::string bytes = testing::read_bytes(dir.file("b.bin"));
  const std::vector<int32_t> h = header_of(bytes);
  EXPECT_EQ(std::vector<int32_t>(h.begin(), h.begin() + 8),
            (std::vector<int32_t>{20240326, 3, 256, 250, 4, 4, 128, 384}));
  const int64_t C = 128, L = 4, Vp = 384, maxT = 256;
  const std::vector<float> p = floats_of(bytes, kLlmcHeaderInts * 4);
  ASSERT_EQ(static_cast<int64_t>(p.size()), count_parameters(config) + (Vp - 250) * C);
  EXPECT_EQ(p[249 * C + 3], state.tensors.at("wte.weight")[249 * C + 3]);
  EXPECT_EQ(p[250 * C + 3], 0.0f);  // padding row
  // qkvw after wte, wpe, ln1w, ln1b: layer 1, k row j, column i.
  const int64_t qkvw = Vp * C + maxT * C + 2 * L * C, layer = 1, i = 5, j = 17;
  EXPECT_EQ(p[qkvw + layer * 3 * C * C + (C + j) * C + i],
            state.tensors.at("blocks.1.attn.wk.weight")[j * C + i]);
  EXPECT_EQ(p.back(), state.tensors.at("lnf.bias").back());
  testing::expect_same_state(state, load_llmc(dir.file("b.bin")));
}

// Catches: version 5 written in another layout or width than version 3 (padding
// included), values truncated instead of rounded, or a reader that ignores the width.
TEST(Llmc, Version5HoldsTheBf16RoundedWeightsInTheSameLayout) {
  testing::TempDir dir;
  ModelConfig config = ModelConfig::preset("gpt2-tiny");
  config.vocab_size = 250;
  const ModelState state = testing::perturbed_state(config);
  save_llmc(state, dir.file("v5.bin"), /*padded_vocab=*/384, DType::bf16);

  const std::string bytes = testing::read_bytes(dir.file("v5.bin"));
  const std::vector<int32_t> h = header_of(bytes);
  EXPECT_EQ(std::vector<int32_t>(h.begin(), h.begin() + 8),
            (std::vector<int32_t>{20240326, 5, 256, 250, 4, 4, 128, 384}));
  const int64_t C = 128, L = 4, Vp = 384, maxT = 256;
  const int64_t params = count_parameters(config) + (Vp - 250) * C;
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), kLlmcHeaderInts * 4 + params * 2);
  std::vector<uint16_t> p(static_cast<size_t>(params));
  std::memcpy(p.data(), bytes.data() + kLlmcHeaderInts * 4, p.size() * 2);
  auto bf16 = [&](const std::string& name, int64_t i) { return f32_to_bf16(state.tensors.at(name)[i]); };
  EXPECT_EQ(p[249 * C + 3], bf16("wte.weight", 249 * C + 3));
  EXPECT_EQ(p[250 * C + 3], 0);  // padding row
  const int64_t qkvw = Vp * C + maxT * C + 2 * L * C, layer = 1, i = 5, j = 17;
  EXPECT_EQ(p[qkvw + layer * 3 * C * C + (C + j) * C + i], bf16("blocks.1.attn.wk.weight", j * C + i));
  EXPECT_EQ(p.back(), bf16("lnf.bias", C - 1));

  const ModelState rounded = testing::rounded_to(state, DType::bf16);
  testing::expect_same_state(rounded, load_llmc(dir.file("v5.bin")));

  // What llm.c's exporter writes for bf16: the version 3 file with version 5 and every
  // float as its bf16.
  save_llmc(state, dir.file("v3.bin"), /*padded_vocab=*/384);
  const std::string v3 = testing::read_bytes(dir.file("v3.bin"));
  const std::vector<float> floats = floats_of(v3, kLlmcHeaderInts * 4);
  std::vector<uint16_t> halves(floats.size());
  for (size_t k = 0; k < floats.size(); ++k) halves[k] = f32_to_bf16(floats[k]);
  std::string made = v3.substr(0, kLlmcHeaderInts * 4);
  const int32_t version = 5;
  std::memcpy(made.data() + 4, &version, 4);
  made.append(reinterpret_cast<const char*>(halves.data()), halves.size() * 2);
  testing::write_bytes(dir.file("made.bin"), made);
  testing::expect_same_state(rounded, load_llmc(dir.file("made.bin")));

  expect_error([&] { save_llmc(state, dir.file("f16.bin"), 0, DType::f16); },
               {"f16", "f32 (version 3)", "bf16 (version 5)"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("f16.bin")));
}

TEST(Llmc, HeaderErrors) {
  testing::TempDir dir;
  const std::string path = dir.file("c.bin");
  save_llmc(testing::perturbed_state(ModelConfig::preset("gpt2-tiny")), path);
  const std::string good = testing::read_bytes(path);
  auto with_header = [&](int index, int32_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + 4 * index, &value, 4);
    return bytes;
  };
  auto expect = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    testing::write_bytes(path, bytes);
    std::vector<std::string> all = parts;
    all.push_back(path);
    expect_error([&] { load_llmc(path); }, all);
  };
  expect(good.substr(0, 100), {"truncated", "100 bytes", "1024-byte header"});
  expect(with_header(0, 1234), {"bad magic 1234", "expected 20240326"});
  expect(with_header(0, kShardMagic), {"bad magic 20240520", "token shard"});
  expect(with_header(1, 4), {"version 4", "supported: 3 for f32 and 5 for bf16"});
  expect(with_header(6, 0), {"model.d_model = 0"});
  const int64_t params = count_parameters(ModelConfig::preset("gpt2-tiny"));
  expect(good.substr(0, good.size() - 4),
         {fmt::format("{} parameters ({} bytes as f32, version 3)", params, params * 4),
          fmt::format("{} bytes after the header", params * 4 - 4)});
  // A version 3 file relabelled 5 holds twice the bytes bf16 needs.
  expect(with_header(1, 5), {fmt::format("{} parameters ({} bytes as bf16, version 5)", params, params * 2),
                             fmt::format("{} bytes after the header", params * 4)});
  expect(with_header(7, 200), {"padded vocab size 200 is below the vocab size 256"});

  expect_error([&] { save_llmc(testing::perturbed_state(ModelConfig::preset("llama-tiny")), path); },
               {"GPT-2", "model.arch = llama"});
}

// Catches: a truncated bf16 checkpoint read as far as it goes (or crashing) instead of
// refused with the sizes.
TEST(Llmc, TruncatedVersion5IsAnErrorWithTheSizes) {
  testing::TempDir dir;
  const std::string path = dir.file("v5.bin");
  save_llmc(testing::perturbed_state(ModelConfig::preset("gpt2-tiny")), path, 0, DType::bf16);
  const std::string good = testing::read_bytes(path);
  const int64_t params = count_parameters(ModelConfig::preset("gpt2-tiny"));
  for (const size_t cut : {size_t{2}, good.size() / 2, good.size() - kLlmcHeaderInts * 4}) {
    testing::write_bytes(path, good.substr(0, good.size() - cut));
    expect_error([&] { load_llmc(path); },
                 {path, fmt::format("{} parameters ({} bytes as bf16, version 5)", params, params * 2),
                  fmt::format("holds {} bytes after the header", params * 2 - static_cast<int64_t>(cut))});
  }
  testing::write_bytes(path, good.substr(0, 1000));
  expect_error([&] { load_llmc(path); }, {path, "truncated", "1000 bytes", "1024-byte header"});
}

}  // namespace
}  // namespace ndt
