// Hugging Face checkpoints in safetensors: a ModelState under the names and layouts
// of transformers' GPT2LMHeadModel (Conv1D weights stored [in, out], q|k|v fused in
// attn.c_attn) and LlamaForCausalLM (nn.Linear [out, in], as ndtrain; Qwen3's
// self_attn.q_norm/k_norm for QK-norm; Qwen-MoE's mlp.gate, mlp.experts.{e}.*_proj and
// mlp.shared_expert for mixture-of-experts blocks, one tensor per expert). RoPE needs no
// permutation: ndtrain rotates halves as transformers' Llama does. GPT-2 MoE blocks,
// which transformers lacks, keep ndtrain's names. The name tables are in
// docs/interchange.md.
#pragma once

#include "core/dtype.h"
#include "interchange/model_state.h"
#include "interchange/safetensors.h"

#include <optional>
#include <string>
#include <vector>

namespace ndt {

// Writes the Hugging Face tensors as `dtype` (f32, bf16 or f16: "F32", "BF16", "F16")
// with __metadata__ holding "format": "pt" and the model's description (config_fields),
// so load_safetensors_hf rebuilds the config. Throws naming the tensor and element of a
// value that is not finite or that `dtype` cannot hold (interchange/stored_values.h).
void save_safetensors_hf(const ModelState& state, const std::string& path, DType dtype = DType::f32);

// Reads a Hugging Face safetensors checkpoint. The config comes from the ndtrain
// metadata when the file has it (config_hint is then unused); otherwise the
// architecture and the shape fields (vocab_size, d_model, n_layer, d_ff; gpt2:
// max_seq_len; llama: n_kv_head, qk_norm, tied_embeddings; MoE: n_experts, moe_every,
// moe_d_ff, moe_shared_d_ff) are read from the tensor shapes and the rest (n_head,
// norm_eps, rope_theta; llama: max_seq_len; MoE: the routing) from config_hint, which is
// then required; those are listed in the state's `assumed`. Unprefixed GPT-2 names (wte.weight, h.0..., as in
// the published gpt2 checkpoint) are accepted as well as transformer.*. Throws
// ndt::Error naming the file and a missing tensor, a shape mismatch (expected and
// found), or the unexpected extra tensors. Ignored: GPT-2's attn.bias / attn.masked_bias
// buffers, and lm_head.weight when embeddings are tied.
ModelState load_safetensors_hf(const std::string& path, std::optional<ModelConfig> config_hint);

// A block's linear layer as transformers names it: its module (the weight's name
// without ".weight"; GPT-2 under "transformer."), the ndtrain weights it holds stacked
// along its output dim (GPT-2's c_attn: wq, wk, wv) and whether it is a Conv1D (GPT-2,
// weight stored [in, out]). Every dense 2-D block weight, not the router or the experts.
struct HfLinear {
  std::string module;
  std::vector<std::string> parts;
  bool conv1d = false;
};
std::vector<HfLinear> hf_linears(const ModelConfig& config);
// Where an ndtrain parameter lives in a Hugging Face file: its tensor, the first row of
// its part along the fused dim 0 in ndtrain's [out, in] layout (GPT-2's c_attn holds
// q|k|v), and whether the file stores it transposed ([in, out], GPT-2's Conv1D). For
// dense models (an MoE expert is one entry of a tensor: throws naming model.n_experts).
struct HfPlace {
  std::string tensor;
  int64_t row_offset = 0;
  bool transposed = false;
};
std::map<std::string, HfPlace> hf_places(const ModelConfig& config, const std::string& gpt2_prefix);
// The shape of every Hugging Face tensor of the config as the file stores it.
std::map<std::string, Shape> hf_file_shapes(const ModelConfig& config, const std::string& gpt2_prefix);
// The state's tensors under Hugging Face names and layouts (GPT-2 under "transformer.").
std::map<std::string, SafetensorsTensor> hf_tensors_of(const ModelState& state);

}  // namespace ndt
