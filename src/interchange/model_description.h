// A model's description: the ModelConfig fields that define a model, as the strings
// checkpoints (metadata.json state "model") and safetensors metadata carry, read back,
// and compared field by field when a run resumes or starts from saved weights.
#pragma once

#include "model/config.h"

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ndt {

// The model's description: every ModelConfig field that shapes its parameters or its
// math, as strings keyed by field name (floats in shortest round-trip form), and only
// those the model uses, so two descriptions of one model are equal:
//   always    arch, vocab_size, max_seq_len, n_layer, n_head, d_model, qk_norm,
//             tied_embeddings, norm_eps, n_experts (0: dense)
//   d_ff      when a block has a dense MLP (a dense model, or moe_every > 1)
//   llama     n_kv_head, rope_theta, qkv_bias, rope_scaling (gpt2 uses none: n_kv_head is
//             n_head, every projection has a bias, no RoPE); with rope_scaling llama3 its
//             rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor,
//             rope_original_max_seq_len
//   MoE       moe_top_k, moe_every, moe_d_ff (the experts' width, resolved), moe_shared_d_ff,
//             moe_score, moe_normalize_top_k, moe_capacity_factor, moe_aux_loss, moe_z_loss
//   LoRA      lora_targets, lora_rank, lora_alpha (model/lora_config.h)
// init_std shapes only the start and is left out.
std::map<std::string, std::string> config_fields(const ModelConfig& config);
// The fields whose difference changes only the training objective (moe_aux_loss,
// moe_z_loss), not what the model computes.
const std::vector<std::string>& objective_only_fields();
// "; model.KEY = THEIRS <where>, OURS <ours_where>" for every field both descriptions
// hold that differs, skipping `ignored` (a field only one holds follows from arch,
// n_experts or moe_every, which are then named); empty when they agree.
std::string config_differences(const ModelConfig& theirs, const ModelConfig& ours, std::string_view where,
                               const std::set<std::string>& ignored = {}, std::string_view ours_where = "in this run");
// The inverse of config_fields. Fields the model does not use may be absent (and are
// ignored when present: descriptions written before MoE settings were saved hold
// gpt2's n_kv_head and no n_experts, which reads as dense). Throws naming `source`, the
// missing key or the value that does not parse, or the invalid config.
ModelConfig config_from_fields(const std::map<std::string, std::string>& fields, const std::string& source);

}  // namespace ndt
