#include "interchange/llmc.h"

#include "core/error.h"
#include "core/output_file.h"
#include "data/shard.h"
#include "interchange/stored_values.h"

#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace ndt {

static_assert(std::endian::native == std::endian::little,
              "llm.c checkpoints are little-endian and read/written in host byte order");

namespace {

constexpr uint64_t kHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);

// The parameters' dtype of a header version; throws naming the file and the version.
DType llmc_dtype(int32_t version, const std::string& path) {
  if (version == kLlmcVersionF32) return DType::f32;
  if (version == kLlmcVersionBf16) return DType::bf16;
  fail("llm.c checkpoint {} has version {} (supported: {} for f32 and {} for bf16 parameters)", path,
       version, kLlmcVersionF32, kLlmcVersionBf16);
}

// ndtrain tensor names in llm.c's order: each group holds its tensors of every layer in turn.
std::vector<std::string> llmc_order(int n_layer) {
  static const std::vector<std::vector<std::string>> groups = {
      {"ln1.weight"},
      {"ln1.bias"},
      {"attn.wq.weight", "attn.wk.weight", "attn.wv.weight"},
      {"attn.wq.bias", "attn.wk.bias", "attn.wv.bias"},
      {"attn.wo.weight"},
      {"attn.wo.bias"},
      {"ln2.weight"},
      {"ln2.bias"},
      {"mlp.fc.weight"},
      {"mlp.fc.bias"},
      {"mlp.proj.weight"},
      {"mlp.proj.bias"}};
  std::vector<std::string> names = {"wte.weight", "wpe.weight"};
  for (const auto& group : groups) {
    for (int l = 0; l < n_layer; ++l) {
      for (const std::string& n : group) names.push_back("blocks." + std::to_string(l) + "." + n);
    }
  }
  names.push_back("lnf.weight");
  names.push_back("lnf.bias");
  return names;
}

}  // namespace

ModelState load_llmc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NDT_CHECK(in && !std::filesystem::is_directory(path), "cannot open llm.c checkpoint {}: {}", path,
            std::strerror(errno));
  const uint64_t file_bytes = std::filesystem::file_size(path);
  std::array<int32_t, kLlmcHeaderInts> h{};
  NDT_CHECK(file_bytes >= kHeaderBytes && in.read(reinterpret_cast<char*>(h.data()), kHeaderBytes),
            "llm.c checkpoint {} is truncated: {} bytes, shorter than the {}-byte header", path, file_bytes,
            kHeaderBytes);
  NDT_CHECK(h[0] == kLlmcMagic, "llm.c checkpoint {} has bad magic {} (expected {}){}", path, h[0],
            kLlmcMagic, h[0] == kShardMagic ? ": that is a token shard, not a checkpoint" : "");
  const DType dtype = llmc_dtype(h[1], path);

  ModelConfig c;
  c.arch = Arch::gpt2;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.n_layer = h[4];
  c.n_head = c.n_kv_head = h[5];
  c.d_model = h[6];
  c.d_ff = h[6] > 0 && h[6] <= INT32_MAX / 4 ? 4 * h[6] : -1;  // -1 (rejected below): 4 C overflows
  c.qk_norm = false;
  c.tied_embeddings = true;
  c.norm_eps = 1e-5f;
  const int padded_vocab = h[7];
  try {
    c.validate();
  } catch (const Error& e) {
    fail("llm.c checkpoint {}: header [maxT, V, L, NH, C] = [{}, {}, {}, {}, {}] is not a valid model: {}",
         path, h[2], h[3], h[4], h[5], h[6], e.what());
  }
  NDT_CHECK(padded_vocab >= c.vocab_size,
            "llm.c checkpoint {}: padded vocab size {} is below the vocab size {}", path, padded_vocab,
            c.vocab_size);
  const int64_t params = count_parameters(c) + int64_t{padded_vocab - c.vocab_size} * c.d_model;
  const uint64_t data_bytes = file_bytes - kHeaderBytes, width = dtype_size(dtype);
  NDT_CHECK(data_bytes == static_cast<uint64_t>(params) * width,
            "llm.c checkpoint {}: the header's shapes make {} parameters ({} bytes as {}, version {}) but the "
            "file holds {} bytes after the header",
            path, params, params * width, dtype_name(dtype), h[1], data_bytes);

  ModelState state{c, {}, {}};
  for (const ParameterSpec& spec : model_parameter_specs(c)) {
    state.tensors[spec.name].resize(static_cast<size_t>(shape_numel(spec.logical_shape)));
  }
  for (const std::string& name : llmc_order(c.n_layer)) {
    NDT_CHECK(read_values(in, dtype, state.tensors.at(name)), "llm.c checkpoint {}: reading {} failed", path,
              name);
    if (name == "wte.weight") {
      in.seekg(static_cast<std::streamoff>((padded_vocab - c.vocab_size) * int64_t{c.d_model} * width),
               std::ios::cur);
    }
  }
  return state;
}

int32_t llmc_version(DType dtype) {
  if (dtype == DType::f32) return kLlmcVersionF32;
  if (dtype == DType::bf16) return kLlmcVersionBf16;
  fail("llm.c checkpoints hold f32 (version {}) or bf16 (version {}) parameters, not {}", kLlmcVersionF32,
       kLlmcVersionBf16, dtype_name(dtype));
}

void save_llmc(const ModelState& state, const std::string& path, int padded_vocab, DType dtype) {
  const int32_t version = llmc_version(dtype);
  check_model_state(state);
  const ModelConfig& c = state.config;
  NDT_CHECK(!c.is_moe(), "llm.c checkpoints hold dense GPT-2 models, not a mixture of experts (model.n_experts = {}): "
            "export it as *.safetensors (docs/interchange.md)", c.n_experts);
  NDT_CHECK(c.arch == Arch::gpt2, "llm.c checkpoints hold GPT-2 models, not model.arch = {}",
            arch_name(c.arch));
  NDT_CHECK(c.tied_embeddings, "llm.c checkpoints need model.tied_embeddings = true");
  NDT_CHECK(c.d_ff == int64_t{4} * c.d_model, "llm.c checkpoints need model.d_ff = 4 x model.d_model = {}, not {}",
            int64_t{4} * c.d_model, c.d_ff);
  NDT_CHECK(!c.qk_norm, "llm.c checkpoints have no QK-norm (model.qk_norm = true)");
  NDT_CHECK(c.norm_eps == 1e-5f, "llm.c checkpoints have LayerNorm epsilon 1e-5, not model.norm_eps = {}",
            c.norm_eps);
  for (const auto& [name, values] : state.tensors) check_storable(path, name, values, dtype);
  if (padded_vocab == 0) padded_vocab = (c.vocab_size + 127) / 128 * 128;
  NDT_CHECK(padded_vocab >= c.vocab_size, "llm.c padded vocab size {} is below model.vocab_size = {}",
            padded_vocab, c.vocab_size);

  std::array<int32_t, kLlmcHeaderInts> h{};
  h[0] = kLlmcMagic;
  h[1] = version;
  h[2] = c.max_seq_len;
  h[3] = c.vocab_size;
  h[4] = c.n_layer;
  h[5] = c.n_head;
  h[6] = c.d_model;
  h[7] = padded_vocab;
  AtomicFile out(path);
  out.write(h.data(), kHeaderBytes);
  for (const std::string& name : llmc_order(c.n_layer)) {
    write_values(out, state.tensors.at(name), dtype);
    if (name == "wte.weight") {
      const std::vector<float> padding(static_cast<size_t>(padded_vocab - c.vocab_size) * c.d_model, 0.0f);
      write_values(out, padding, dtype);
    }
  }
  out.commit();
}

}  // namespace ndt
