// Every element of every tensor where each interchange format's published layout puts it
// (issue 35, class 7). Round trips cannot see a layout bug that export and import share:
// a square matrix written transposed and read back transposed comes back exact. So each
// file is read as raw tensors (safetensors) or raw floats at their offsets (llm.c) and
// every element is compared with the ndtrain tensor at the position the format's owners
// publish, written out here independently of src/interchange:
//   transformers GPT2LMHeadModel: Conv1D weights [in, out], so hf[i][j] = ours[j][i]
//     (c_attn: hf[i][k C + j] = W_k[j][i] for k = q, k, v; c_proj of attention is square);
//   transformers LlamaForCausalLM (Qwen3 for q_norm/k_norm): nn.Linear [out, in] as ours,
//     including the square q_proj and o_proj;
//   llm.c train_gpt2.c ParameterTensors: wte [Vp, C], wpe, then each kind for every layer
//     (ln1w, ln1b, qkvw [3C, C] = q, k, v rows, qkvb, attprojw [C, C], attprojb, ln2w, ln2b,
//     fcw [4C, C], fcb, fcprojw [C, 4C], fcprojb), lnfw, lnfb; matmuls as out = in W^T, so
//     every weight [out, in] as ours.
#include "../common/temp_dir.h"
#include "interchange/hf_names.h"
#include "interchange/llmc.h"
#include "interchange/safetensors.h"
#include "support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ndt {
namespace {

// A published tensor: its shape, and the ndtrain value at each of its elements.
struct Published {
  Shape shape;
  std::function<float(int64_t row, int64_t col)> at;  // 1-D tensors: row 0, col = index
};

// ours(name)[r][c] of a tensor with `cols` columns.
std::function<float(int64_t, int64_t)> same(const ModelState& s, const std::string& name, int64_t cols) {
  const std::vector<float>* v = &s.tensors.at(name);
  return [v, cols](int64_t r, int64_t c) { return (*v)[static_cast<size_t>(r * cols + c)]; };
}
// The transpose of ours(name) [rows_ours, cols_ours]: published[i][j] = ours[j][i].
std::function<float(int64_t, int64_t)> transposed(const ModelState& s, const std::string& name, int64_t cols_ours) {
  const std::vector<float>* v = &s.tensors.at(name);
  return [v, cols_ours](int64_t i, int64_t j) { return (*v)[static_cast<size_t>(j * cols_ours + i)]; };
}

std::map<std::string, Published> gpt2_published(const ModelState& s) {
  const ModelConfig& c = s.config;
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size, T = c.max_seq_len;
  std::map<std::string, Published> p;
  p["transformer.wte.weight"] = {{V, C}, same(s, "wte.weight", C)};
  p["transformer.wpe.weight"] = {{T, C}, same(s, "wpe.weight", C)};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
    for (const auto& [hf, ours] : {std::pair{"ln_1", "ln1"}, {"ln_2", "ln2"}}) {
      p[h + hf + ".weight"] = {{C}, same(s, b + ours + ".weight", C)};
      p[h + hf + ".bias"] = {{C}, same(s, b + ours + ".bias", C)};
    }
    const std::vector<float>*q = &s.tensors.at(b + "attn.wq.weight"), *k = &s.tensors.at(b + "attn.wk.weight"),
    *v = &s.tensors.at(b + "attn.wv.weight");
    p[h + "attn.c_attn.weight"] = {{C, 3 * C}, [=](int64_t i, int64_t col) {
                                     const std::vector<float>* w = col < C ? q : col < 2 * C ? k : v;
                                     return (*w)[static_cast<size_t>((col % C) * C + i)];
                                   }};
    const std::vector<float>*qb = &s.tensors.at(b + "attn.wq.bias"), *kb = &s.tensors.at(b + "attn.wk.bias"),
    *vb = &s.tensors.at(b + "attn.wv.bias");
    p[h + "attn.c_attn.bias"] = {{3 * C}, [=](int64_t, int64_t col) {
                                   return (*(col < C ? qb : col < 2 * C ? kb : vb))[static_cast<size_t>(col % C)];
                                 }};
    p[h + "attn.c_proj.weight"] = {{C, C}, transposed(s, b + "attn.wo.weight", C)};  // square
    p[h + "attn.c_proj.bias"] = {{C}, same(s, b + "attn.wo.bias", C)};
    p[h + "mlp.c_fc.weight"] = {{C, F}, transposed(s, b + "mlp.fc.weight", C)};
    p[h + "mlp.c_fc.bias"] = {{F}, same(s, b + "mlp.fc.bias", F)};
    p[h + "mlp.c_proj.weight"] = {{F, C}, transposed(s, b + "mlp.proj.weight", F)};
    p[h + "mlp.c_proj.bias"] = {{C}, same(s, b + "mlp.proj.bias", C)};
  }
  p["transformer.ln_f.weight"] = {{C}, same(s, "lnf.weight", C)};
  p["transformer.ln_f.bias"] = {{C}, same(s, "lnf.bias", C)};
  return p;
}

std::map<std::string, Published> llama_published(const ModelState& s) {
  const ModelConfig& c = s.config;
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size, HS = c.head_dim(), KV = int64_t{c.kv_heads()} * HS;
  std::map<std::string, Published> p;
  p["model.embed_tokens.weight"] = {{V, C}, same(s, "wte.weight", C)};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".", b = "blocks." + std::to_string(l) + ".";
    p[h + "input_layernorm.weight"] = {{C}, same(s, b + "ln1.weight", C)};
    p[h + "self_attn.q_proj.weight"] = {{C, C}, same(s, b + "attn.wq.weight", C)};  // square
    p[h + "self_attn.k_proj.weight"] = {{KV, C}, same(s, b + "attn.wk.weight", C)};
    p[h + "self_attn.v_proj.weight"] = {{KV, C}, same(s, b + "attn.wv.weight", C)};
    p[h + "self_attn.o_proj.weight"] = {{C, C}, same(s, b + "attn.wo.weight", C)};  // square
    p[h + "self_attn.q_norm.weight"] = {{HS}, same(s, b + "attn.q_norm.weight", HS)};
    p[h + "self_attn.k_norm.weight"] = {{HS}, same(s, b + "attn.k_norm.weight", HS)};
    p[h + "post_attention_layernorm.weight"] = {{C}, same(s, b + "ln2.weight", C)};
    p[h + "mlp.gate_proj.weight"] = {{F, C}, same(s, b + "mlp.gate.weight", C)};
    p[h + "mlp.up_proj.weight"] = {{F, C}, same(s, b + "mlp.up.weight", C)};
    p[h + "mlp.down_proj.weight"] = {{C, F}, same(s, b + "mlp.down.weight", F)};
  }
  p["model.norm.weight"] = {{C}, same(s, "lnf.weight", C)};
  p["lm_head.weight"] = {{V, C}, same(s, "lm_head.weight", C)};
  return p;
}

// Every tensor of the file is a published one, and every element sits where published.
void expect_published_layout(const SafetensorsFile& file, const std::map<std::string, Published>& published) {
  ASSERT_EQ(file.tensors.size(), published.size());
  for (const auto& [name, p] : published) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.tensors.count(name));
    const SafetensorsTensor& t = file.tensors.at(name);
    ASSERT_EQ(t.shape, p.shape);
    const int64_t rows = p.shape.size() == 2 ? p.shape[0] : 1, cols = p.shape.back();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        ASSERT_EQ(t.values[static_cast<size_t>(r * cols + col)], p.at(r, col)) << "element [" << r << ", " << col << "]";
      }
    }
  }
}

// Catches: a tensor written in another layout than transformers reads (a square Conv1D
// or nn.Linear weight transposed on export and import alike, which a round trip and
// every non-square shape check miss).
TEST(PublishedLayout, SafetensorsHoldsEveryElementWhereTransformersReadsIt) {
  testing::TempDir dir;
  ModelConfig gpt2 = ModelConfig::preset("gpt2-tiny");
  gpt2.n_layer = 2;
  const ModelState g = testing::perturbed_state(gpt2);
  save_safetensors_hf(g, dir.file("g.safetensors"));
  expect_published_layout(read_safetensors(dir.file("g.safetensors")), gpt2_published(g));

  ModelConfig llama = testing::llama_qk_norm();
  llama.n_layer = 2;
  const ModelState l = testing::perturbed_state(llama);
  save_safetensors_hf(l, dir.file("l.safetensors"));
  expect_published_layout(read_safetensors(dir.file("l.safetensors")), llama_published(l));
}

// Catches: an llm.c file whose parameters are in another order or layout than llm.c's
// train_gpt2.c reads (a square attprojw transposed both ways; a qkv row block swapped).
TEST(PublishedLayout, LlmcHoldsEveryElementAtItsOffset) {
  testing::TempDir dir;
  ModelConfig c = ModelConfig::preset("gpt2-tiny");
  c.n_layer = 2;
  c.vocab_size = 250;  // padded to 256 rows
  const ModelState s = testing::perturbed_state(c);
  save_llmc(s, dir.file("m.bin"));
  const std::string bytes = testing::read_bytes(dir.file("m.bin"));
  std::vector<float> file((bytes.size() - kLlmcHeaderInts * 4) / 4);
  std::memcpy(file.data(), bytes.data() + kLlmcHeaderInts * 4, file.size() * 4);
  const int64_t C = c.d_model, L = c.n_layer, V = c.vocab_size, Vp = 256, T = c.max_seq_len;
  size_t at = 0;
  // `count` floats, the i-th of which is value(i).
  auto expect_next = [&](const std::string& what, int64_t count, const std::function<float(int64_t)>& value) {
    SCOPED_TRACE(what);
    ASSERT_LE(at + static_cast<size_t>(count), file.size());
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(file[at + static_cast<size_t>(i)], value(i)) << "element " << i;
    at += static_cast<size_t>(count);
  };
  auto ours = [&](const std::string& name) { return &s.tensors.at(name); };
  auto layer = [](int64_t l, const char* name) { return "blocks." + std::to_string(l) + "." + name; };
  expect_next("wte", Vp * C, [&](int64_t i) { return i < V * C ? (*ours("wte.weight"))[static_cast<size_t>(i)] : 0.0f; });
  expect_next("wpe", T * C, [&](int64_t i) { return (*ours("wpe.weight"))[static_cast<size_t>(i)]; });
  // Per kind, every layer in turn; qkvw / qkvb: q rows, then k, then v.
  const std::vector<std::pair<std::string, std::vector<const char*>>> kinds = {
      {"ln1w", {"ln1.weight"}},        {"ln1b", {"ln1.bias"}},
      {"qkvw", {"attn.wq.weight", "attn.wk.weight", "attn.wv.weight"}},
      {"qkvb", {"attn.wq.bias", "attn.wk.bias", "attn.wv.bias"}},
      {"attprojw", {"attn.wo.weight"}}, {"attprojb", {"attn.wo.bias"}},
      {"ln2w", {"ln2.weight"}},        {"ln2b", {"ln2.bias"}},
      {"fcw", {"mlp.fc.weight"}},      {"fcb", {"mlp.fc.bias"}},
      {"fcprojw", {"mlp.proj.weight"}}, {"fcprojb", {"mlp.proj.bias"}}};
  for (const auto& [kind, parts] : kinds) {
    for (int64_t l = 0; l < L; ++l) {
      for (const char* part : parts) {
        const std::vector<float>* v = ours(layer(l, part));
        expect_next(kind + " layer " + std::to_string(l) + " " + part, static_cast<int64_t>(v->size()),
                    [&](int64_t i) { return (*v)[static_cast<size_t>(i)]; });
      }
    }
  }
  expect_next("lnfw", C, [&](int64_t i) { return (*ours("lnf.weight"))[static_cast<size_t>(i)]; });
  expect_next("lnfb", C, [&](int64_t i) { return (*ours("lnf.bias"))[static_cast<size_t>(i)]; });
  EXPECT_EQ(at, file.size());
}

}  // namespace
}  // namespace ndt
