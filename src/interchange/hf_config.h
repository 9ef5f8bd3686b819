// config.json of a Hugging Face model folder, read into a ModelConfig and written from
// one. Families: GPT-2 (model_type gpt2), Llama 2/3.x and SmolLM (llama), Qwen2 (qwen2:
// biases on q, k, v) and Qwen3 (qwen3: QK-norm); Llama 3's rope_scaling (rope_type
// "llama3") is read and written. Anything a family has that ndtrain's model does not
// compute (another architecture, activation, rope_scaling type, an o_proj or MLP bias,
// sliding windows, a head_dim other than hidden_size / num_attention_heads) is refused
// naming the field and its value. The field table is in docs/interchange.md.
#pragma once

#include "model/config.h"

#include <string>

namespace ndt {

// Reads `path` (a config.json). Throws ndt::Error naming the file, the field and the value.
ModelConfig read_hf_config(const std::string& path);

// The config.json text of `config` in the family its fields select: gpt2; llama with
// qk_norm is qwen3, with qkv_bias qwen2, else llama. torch_dtype names `dtype_name` (the
// dtype the weights are stored in). Throws naming the field a family cannot express
// (an MoE model, QK-norm on gpt2, QK-norm with a q/k/v bias).
std::string hf_config_json(const ModelConfig& config, const std::string& torch_dtype);

}  // namespace ndt
