// LoRA adapters out of a trained model (docs/fine_tuning.md):
//   merge_lora: the full model with every adapted weight W + (alpha / r) B A, the
//     adapters gone (what convert --merge-lora writes in any model format);
//   save_peft_adapter: the adapters alone as a PEFT folder (adapter_model.safetensors
//     under PEFT's tensor names, adapter_config.json), loadable by
//     PeftModel.from_pretrained on the transformers model of the base weights.
// GPT-2 fuses q, k and v in one Conv1D (c_attn): its adapters there are written as one
// adapter of rank k r (k of q, k, v adapted) with A = [A_q; A_k; A_v] and B block-
// diagonal, and rank_pattern / alpha_pattern so PEFT's scale stays alpha / r.
#pragma once

#include "interchange/model_state.h"

#include <string>

namespace ndt {

// Throws naming the model when it has no adapters (config.lora.targets empty).
ModelState merge_lora(const ModelState& state);
// `dir` must not exist; it is created with the two files. Throws as merge_lora does.
void save_peft_adapter(const ModelState& state, const std::string& dir);

}  // namespace ndt
