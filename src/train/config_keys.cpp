// The table of configuration keys (train/config_keys.h), one function per section
// in the order docs/config.md lists them.
#include "train/config_keys.h"

#include "core/error.h"
#include "core/text_list.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace ndt {

namespace {
// The one place numbers are parsed, from the file and from --set alike. nan and
// infinities are refused here, so no timeout, size or rate can be non-finite and the
// range checks of validate() need not ask.
template <typename T>
T parse_number(const std::string& key, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) fail("{} = {} is out of range", key, text);
  if (ec != std::errc() || ptr != end) {
    fail("{} = \"{}\" is not a valid {}", key, text,
         std::is_integral_v<T> ? "integer" : "number");
  }
  if constexpr (std::is_floating_point_v<T>) {
    NDT_CHECK(std::isfinite(value), "{} = {} is not a finite number", key, text);
  }
  return value;
}

// "text" with newlines and quotes escaped, as TOML would write it.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '\n') out += "\\n";
    else if (ch == '"' || ch == '\\') out += std::string("\\") + ch;
    else out += ch;
  }
  return out + "\"";
}

// A list of names: a TOML list of strings (["a", "b"]) as the file gives it, or the same
// comma-separated ("a, b") as --set may; "" is the empty list.
std::vector<std::string> parse_name_list(const std::string& key, const std::string& text) {
  if (!text.empty() && text.front() == '[') return parse_string_list(key, text);
  std::vector<std::string> items = split_trimmed(text);
  if (items.size() == 1 && items[0].empty()) return {};
  return items;
}

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  fail("{} = \"{}\" is not a boolean (true or false)", key, text);
}

// A field bound to a member reached by `ref`; T picks the parser.
template <typename T, typename Ref>
ConfigKey field(std::string key, Ref ref, std::string doc) {
  ConfigKey f;
  f.key = key;
  f.doc = std::move(doc);
  f.set = [key, ref](RunConfig& c, const std::string& text) {
    T& target = ref(c);
    if constexpr (std::is_same_v<T, bool>) {
      target = parse_bool(key, text);
    } else if constexpr (std::is_same_v<T, std::string>) {
      target = text;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      target = parse_name_list(key, text);
    } else {
      target = parse_number<T>(key, text);
    }
  };
  f.get = [ref](const RunConfig& c) {
    const T& value = ref(const_cast<RunConfig&>(c));
    if constexpr (std::is_same_v<T, bool>) return std::string(value ? "true" : "false");
    else if constexpr (std::is_same_v<T, std::string>) return quoted(value);
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) return string_list_text(value);
    else return fmt::format("{}", value);
  };
  return f;
}


// A key with a fixed set of values: parsed into the enum E by from_name (which throws
// naming the key and the choices), written back by name.
template <typename E, typename Ref>
ConfigKey enum_field(std::string key, Ref ref, E (*from_name)(std::string_view), std::string_view (*name)(E),
                 std::string doc) {
  ConfigKey f;
  f.key = std::move(key);
  f.doc = std::move(doc);
  f.set = [ref, from_name](RunConfig& c, const std::string& text) { ref(c) = from_name(text); };
  f.get = [ref, name](const RunConfig& c) { return fmt::format("\"{}\"", name(ref(const_cast<RunConfig&>(c)))); };
  return f;
}

#define NDT_REF(member) [](RunConfig& c) -> auto& { return c.member; }

void add_model_keys(std::vector<ConfigKey>& f) {
  ConfigKey preset;
  preset.key = "model.preset";
  preset.doc =
      "Named model shape applied before the other model.* keys (which then override it): "
      "gpt2-124m, gpt2-350m, gpt2-tiny, llama-small, llama-tiny, llama-1b (Llama 3.2 1B's shape, 32000-token vocabulary), and the mixture-of-experts gpt2-moe-tiny, llama-moe-tiny (8 experts of half width, top-2). Empty: start from the defaults.";
  preset.set = [](RunConfig& c, const std::string& v) {
    if (!v.empty()) c.model = ModelConfig::preset(v);
  };
  preset.get = [](const RunConfig&) { return std::string("\"\""); };
  f.push_back(preset);
  ConfigKey arch;
  arch.key = "model.arch";
  arch.doc = "Architecture family: gpt2 (LayerNorm, learned positions, GELU, biases, tied embeddings) or "
             "llama (RMSNorm, RoPE, SwiGLU, no biases, untied output layer). Applied after model.preset "
             "and before the other model.* keys: setting it also sets the family's model.tied_embeddings, "
             "which an explicit model.tied_embeddings then overrides.";
  arch.set = [](RunConfig& c, const std::string& v) { c.model.set_arch(arch_from_name(v)); };
  arch.get = [](const RunConfig& c) { return fmt::format("\"{}\"", arch_name(c.model.arch)); };
  f.push_back(arch);
  f.push_back(field<int>("model.vocab_size", NDT_REF(model.vocab_size), "Vocabulary size (256 for byte-level data)."));
  f.push_back(field<int>("model.max_seq_len", NDT_REF(model.max_seq_len), "Longest sequence the model accepts (size of the position table for gpt2)."));
  f.push_back(field<int>("model.n_layer", NDT_REF(model.n_layer), "Number of transformer blocks."));
  f.push_back(field<int>("model.n_head", NDT_REF(model.n_head), "Attention heads; must divide model.d_model."));
  f.push_back(field<int>("model.n_kv_head", NDT_REF(model.n_kv_head), "Key/value heads (llama, grouped-query attention); must divide model.n_head. gpt2 uses n_head."));
  f.push_back(field<int>("model.d_model", NDT_REF(model.d_model), "Width of the residual stream."));
  f.push_back(field<int>("model.d_ff", NDT_REF(model.d_ff), "Hidden width of the MLP (4 x d_model for gpt2)."));
  f.push_back(field<bool>("model.qk_norm", NDT_REF(model.qk_norm), "RMSNorm on each head's queries and keys before attention."));
  f.push_back(field<bool>("model.tied_embeddings", NDT_REF(model.tied_embeddings), "Output layer shares the token embedding matrix. Default: the family's (model.arch: gpt2 tied, llama untied)."));
  f.push_back(field<float>("model.norm_eps", NDT_REF(model.norm_eps), "Epsilon of LayerNorm/RMSNorm."));
  f.push_back(field<float>("model.rope_theta", NDT_REF(model.rope_theta), "RoPE base (llama)."));
  f.push_back(field<bool>("model.qkv_bias", NDT_REF(model.qkv_bias), "Biases on the query, key and value projections (llama; Qwen2 has them). gpt2 has every bias."));
  ConfigKey scaling;
  scaling.key = "model.rope_scaling";
  scaling.doc = "RoPE frequency scaling (llama): \"none\", or \"llama3\" (Llama 3.1's remapping of the low frequencies by the four model.rope_* keys below, as transformers' rope_type llama3).";
  scaling.set = [](RunConfig& c, const std::string& v) { c.model.rope_scaling = rope_scaling_from_name(v); };
  scaling.get = [](const RunConfig& c) { return fmt::format("\"{}\"", rope_scaling_name(c.model.rope_scaling)); };
  f.push_back(scaling);
  f.push_back(field<float>("model.rope_scaling_factor", NDT_REF(model.rope_scaling_factor), "llama3 scaling: the low frequencies are divided by it (transformers' factor)."));
  f.push_back(field<float>("model.rope_low_freq_factor", NDT_REF(model.rope_low_freq_factor), "llama3 scaling: wavelengths beyond rope_original_max_seq_len / this are scaled fully (transformers' low_freq_factor)."));
  f.push_back(field<float>("model.rope_high_freq_factor", NDT_REF(model.rope_high_freq_factor), "llama3 scaling: wavelengths below rope_original_max_seq_len / this are kept; between the two they are interpolated (transformers' high_freq_factor)."));
  f.push_back(field<int>("model.rope_original_max_seq_len", NDT_REF(model.rope_original_max_seq_len), "llama3 scaling: the context length the model was first trained at (transformers' original_max_position_embeddings)."));
  f.push_back(field<float>("model.init_std", NDT_REF(model.init_std), "Std of the normal initialisation; residual projections use init_std / sqrt(2 n_layer)."));
  f.push_back(field<int>("model.n_experts", NDT_REF(model.n_experts), "Mixture of experts (docs/moe.md): routed experts of each MoE block; 0: every block dense."));
  f.push_back(field<int>("model.moe_top_k", NDT_REF(model.moe_top_k), "Experts each token is routed to (at most model.n_experts)."));
  f.push_back(field<int>("model.moe_every", NDT_REF(model.moe_every), "Block l is an MoE block when (l + 1) % moe_every == 0 (1: every block; 2: blocks 1, 3, ...)."));
  f.push_back(field<int>("model.moe_d_ff", NDT_REF(model.moe_d_ff), "Hidden width of each routed expert (SwiGLU for llama, GELU for gpt2; no biases); 0: model.d_ff."));
  f.push_back(field<int>("model.moe_shared_d_ff", NDT_REF(model.moe_shared_d_ff), "Width of the shared MLP every token of an MoE block also passes through (DeepSeek's shared experts: their count x their width); 0: none."));
  ConfigKey score;
  score.key = "model.moe_score";
  score.doc = "How the router scores experts: softmax over the experts (Mixtral, Switch) or sigmoid per expert (DeepSeek-V3).";
  score.set = [](RunConfig& c, const std::string& v) { c.model.moe_score = moe_score_from_name(v); };
  score.get = [](const RunConfig& c) { return fmt::format("\"{}\"", moe_score_name(c.model.moe_score)); };
  f.push_back(score);
  f.push_back(field<bool>("model.moe_normalize_top_k", NDT_REF(model.moe_normalize_top_k), "Divide the chosen experts' scores by their sum to get the combine weights."));
  f.push_back(field<float>("model.moe_capacity_factor", NDT_REF(model.moe_capacity_factor), "0: dropless (every token reaches its experts). Else each expert takes at most ceil(factor x train.seq_len x moe_top_k / n_experts) tokens of each sequence, admitted in position order; the rest are dropped (the residual carries them). Not with parallel.cp > 1."));
  f.push_back(field<float>("model.moe_aux_loss", NDT_REF(model.moe_aux_loss), "Coefficient of the load-balancing loss (Switch form E x sum_e f_e P_e, per sequence, averaged over the batch's sequences)."));
  f.push_back(field<float>("model.moe_z_loss", NDT_REF(model.moe_z_loss), "Coefficient of the router z-loss (mean of logsumexp(router logits)^2); 0: none."));
}

// LoRA (docs/fine_tuning.md): part of the model's shape, kept in its checkpoints.
void add_lora_keys(std::vector<ConfigKey>& f) {
  ConfigKey targets;
  targets.key = "lora.targets";
  targets.doc = "Low-rank adapters (docs/fine_tuning.md) on these linear layers of every block, by name (\"wq\", "
                "\"wk\", \"wv\", \"wo\"; gpt2 \"mlp.fc\", \"mlp.proj\"; llama \"mlp.gate\", \"mlp.up\", "
                "\"mlp.down\") or glob pattern (\"mlp.*\"). Every other parameter is then frozen. Empty: no LoRA.";
  targets.set = [](RunConfig& c, const std::string& v) { c.model.lora.targets = parse_lora_targets(v); };
  targets.get = [](const RunConfig& c) { return string_list_text(c.model.lora.targets); };
  f.push_back(targets);
  f.push_back(field<int>("lora.rank", NDT_REF(model.lora.rank), "Rank r of each adapter (A [r, in], B [out, r]); at most min(in, out) of every target."));
  f.push_back(field<float>("lora.alpha", NDT_REF(model.lora.alpha), "Scale numerator: an adapted layer computes W x + (alpha / r) B A x."));
  f.push_back(field<float>("lora.dropout", NDT_REF(model.lora.dropout), "Dropout on the adapters' input: not built, must be 0."));
}

void add_train_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<int64_t>("train.steps", NDT_REF(steps), "Optimizer steps to run. 0: only write the initial state as a checkpoint (after train.init_from, if set) and stop."));
  f.push_back(field<int>("train.batch_size", NDT_REF(batch_size), "Sequences per optimizer step (global batch)."));
  f.push_back(field<int>("train.micro_batch_size", NDT_REF(micro_batch_size), "Sequences per forward/backward on one rank; each rank accumulates batch_size / (micro_batch_size x data-parallel size) micro-steps. 0: batch_size / data-parallel size (no accumulation)."));
  f.push_back(field<int>("train.seq_len", NDT_REF(seq_len), "Tokens per sequence (at most model.max_seq_len)."));
  f.push_back(field<uint64_t>("train.seed", NDT_REF(seed), "Seed of initialisation, batch order and sampling; the batch of a step depends only on (seed, step)."));
  f.push_back(field<int64_t>("train.eval_every", NDT_REF(eval_every), "Validation loss every this many steps (and at the end); 0: only at the end."));
  f.push_back(field<int>("train.eval_batches", NDT_REF(eval_batches), "Batches of validation data per evaluation, each train.batch_size rows split over the data-parallel ranks like a training batch (the same rows on any mesh)."));
  f.push_back(field<int>("train.loss_chunk_rows", NDT_REF(loss_chunk_rows), "Rows of logits computed at once by the fused output layer and loss (memory: rows x vocab floats)."));
  f.push_back(field<std::vector<std::string>>("train.freeze", NDT_REF(model.freeze), "Fine-tuning (docs/fine_tuning.md): parameters left unchanged, as patterns over their names, e.g. [\"embeddings\", \"blocks.0-11.attn\"] (\"*\" any segment or text within one, \"A-B\" block indices A..B, a pattern covers the names it begins; \"embeddings\": wte, wpe; \"head\": lnf, lm_head). A frozen parameter has no gradient, no optimizer state and no gradient communication; a pattern matching nothing is an error. Empty: train everything."));
  f.push_back(field<std::string>("train.init_from", NDT_REF(init_from), "Start from these weights instead of a random initialisation, on any layout, with fresh optimizer state at step 0 (fine-tuning): a *.safetensors file (Hugging Face names), an llm.c *.bin, an ndtrain checkpoint (model-only or training; a folder of them or a run folder: its newest), or a Hugging Face model folder (config.json with model.safetensors or a sharded model.safetensors.index.json; each rank reads only its slices), whose config.json also sets the model.* keys the config leaves out (docs/interchange.md). The model.* keys must describe the same model: each difference is named. With LoRA, adapters the source lacks keep their start."));
  ConfigKey checkpointing;
  checkpointing.key = "train.activation_checkpointing";
  checkpointing.doc = "What each block keeps for backward (docs/activation_checkpointing.md). none: everything. "
                      "full: only its input; backward reruns the block's forward (about a third more compute, "
                      "most of the activation memory saved). selective: everything but the norm outputs, the "
                      "attention probabilities and the MLP activation, which backward recomputes (the attention "
                      "core: a few percent more compute). Gradients are bitwise those of none. With gradient "
                      "accumulation the saving is per micro-batch: a smaller train.micro_batch_size and "
                      "checkpointing both cut activations, and recompute costs the same fraction of each step.";
  checkpointing.set = [](RunConfig& c, const std::string& v) {
    c.activation_checkpointing.mode = checkpoint_mode_from_name(v);
  };
  checkpointing.get = [](const RunConfig& c) {
    return fmt::format("\"{}\"", checkpoint_mode_name(c.activation_checkpointing.mode));
  };
  f.push_back(checkpointing);
  f.push_back(field<int>("train.activation_checkpointing_every", NDT_REF(activation_checkpointing.every), "With activation_checkpointing = \"full\": recompute only the blocks whose index is a multiple of this (1: every block; 2: blocks 0, 2, 4, ...); the others keep everything."));
  f.push_back(field<int64_t>("train.log_every", NDT_REF(log_every), "Print a progress line every this many steps (the metrics file gets every step)."));
  f.push_back(field<bool>("train.profile", NDT_REF(profile), "Time every step by op class (GEMMs by dtype, attention, cross-entropy, norms, elementwise, casts, optimizer, MoE routing), communication and the rest, as `ndtrain bench train --profile` does: each step record of metrics.jsonl gets a \"profile\" object of seconds, the step of the rank that spent the longest in kernels (named by its \"rank\"), and the summary the peak measured again after the last step (\"peak_flops_at_end\", about 0.2 s). The timers read the clock twice per kernel call. `ndtrain plan --validate` turns it on to set each class against the planner's term."));
}

void add_optim_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<float>("optim.lr", NDT_REF(schedule.max_lr), "Peak learning rate, reached after warmup."));
  f.push_back(field<float>("optim.min_lr_ratio", NDT_REF(schedule.min_lr_ratio), "Cosine decay floor as a fraction of optim.lr, reached at the last step."));
  f.push_back(field<int64_t>("optim.decay_steps", NDT_REF(schedule.decay_steps), "Step at which the cosine decay reaches its floor; 0: train.steps. Set it when a run will be resumed with more steps, so the schedule does not change."));
  f.push_back(field<int64_t>("optim.warmup_steps", NDT_REF(schedule.warmup_steps), "Steps of linear warmup from 0."));
  f.push_back(field<float>("optim.beta1", NDT_REF(adamw.beta1), "AdamW first-moment decay."));
  f.push_back(field<float>("optim.beta2", NDT_REF(adamw.beta2), "AdamW second-moment decay."));
  f.push_back(field<float>("optim.eps", NDT_REF(adamw.eps), "AdamW epsilon."));
  f.push_back(field<float>("optim.weight_decay", NDT_REF(adamw.weight_decay), "Decoupled weight decay, on the parameters optim.weight_decay_policy names."));
  ConfigKey decay_policy;
  decay_policy.key = "optim.weight_decay_policy";
  decay_policy.doc = "Which parameters optim.weight_decay applies to. matrices: linear weight matrices only "
                     "(attention and MLP projections, an untied output layer), not embeddings, norms or biases. "
                     "matrices_and_embeddings: every parameter of 2 or more dimensions, embeddings (so a tied "
                     "output layer) included, as nanoGPT and llm.c's CUDA trainer. all: every parameter, as "
                     "llm.c's CPU trainer.";
  decay_policy.set = [](RunConfig& c, const std::string& v) {
    c.weight_decay_policy = weight_decay_policy_from_name(v);
  };
  decay_policy.get = [](const RunConfig& c) {
    return fmt::format("\"{}\"", weight_decay_policy_name(c.weight_decay_policy));
  };
  f.push_back(decay_policy);
  f.push_back(field<float>("optim.grad_clip", NDT_REF(grad_clip), "optim.clip_mode = norm: clip the global gradient norm to this value; 0 disables."));
  f.push_back(enum_field("optim.clip_mode", NDT_REF(clip_mode), clip_mode_from_name, clip_mode_name,
                       "norm (clip to optim.grad_clip) or zclip (ZClip: after optim.zclip_warmup steps, a norm whose z-score on an exponential moving average of the norm's mean and variance exceeds optim.zclip_threshold is clipped to mean + threshold x std; src/optim/zclip.h, docs/stability.md)."));
  f.push_back(field<float>("optim.z_loss", NDT_REF(z_loss), "PaLM's z-loss: adds this x lse(logits)^2 per token to the loss (inside the fused and vocab-parallel cross-entropy), keeping the softmax normaliser near 1; reported as z_loss apart from the loss. 0: off (1e-4 is PaLM's)."));
  f.push_back(field<double>("optim.zclip_alpha", NDT_REF(zclip.alpha), "ZClip: the moving averages' decay, in (0, 1)."));
  f.push_back(field<double>("optim.zclip_threshold", NDT_REF(zclip.threshold), "ZClip: the z-score above which a norm is clipped."));
  f.push_back(field<int>("optim.zclip_warmup", NDT_REF(zclip.warmup_steps), "ZClip: applied steps whose norms only start the statistics (never clipped)."));
}

void add_data_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<std::string>("data.train", NDT_REF(train_data), "Training token shards (docs/data.md; `ndtrain prepare`): a shard, a glob (\"data/fineweb/train_*.bin\", matches sorted) or a list of them ([\"a.bin\", \"b/*.bin\"]), read memory-mapped as one concatenation; uint16 (llm.c version 1) or uint32 (version 2) shards."));
  f.push_back(field<std::string>("data.val", NDT_REF(val_data), "Validation token shards, as data.train; empty: validate on the training data."));
  f.push_back(field<std::string>("data.mix", NDT_REF(data_mix), "A blend of training sets instead of data.train: [{ path = \"a/*.bin\", weight = 0.7 }, { path = \"b.bin\", weight = 0.3 }]. Each row of a batch picks its set by the weights from (seed, step, row), so the blend is deterministic and resumes exactly; the realised fractions are reported at the end and in the metrics summary."));
  f.push_back(field<std::string>("data.tokenizer", NDT_REF(tokenizer), "Tokenizer for the sample's prompt and text (tokenizer.json, encoder.json or *.tiktoken). Empty: the one `ndtrain prepare --tokenizer` recorded beside the first training shard, else bytes. model.vocab_size must cover its vocabulary."));
  f.push_back(field<bool>("data.document_boundaries", NDT_REF(document_boundaries), "Each row's documents are kept apart: a token attends only to the earlier tokens of its own document (the causal mask restarts at every document start) and positions restart at 0 there, on every layout (tensor, context and pipeline parallel included), so a row holding several documents trains exactly as each document fed alone. A document starts at each data.document_separator token: `ndtrain prepare` writes it before every document, so it is the document's first token (its BOS), and a row's tokens before its first separator are a document of their own (docs/data.md). false: documents in a row see each other, as llm.c trains."));
  f.push_back(field<int>("data.document_separator", NDT_REF(document_separator), "The token id that starts a document under data.document_boundaries. -1: the separator `ndtrain prepare --tokenizer` recorded beside the shards (tokenizer_info.json; every training and validation folder must record the same one). Byte-level shards record none: give one (e.g. 10, a newline)."));
  f.push_back(field<bool>("data.loss_mask", NDT_REF(loss_mask), "Only response tokens count in the loss: every training and validation shard needs the loss mask `ndtrain prepare --format chat` or `--format prompt-response` writes beside it (<shard>.mask, one byte per token), and a target counts when its token's byte is 1. The loss is the sum of the counted targets' losses over the global count of counted targets of the whole batch (all micro-batches, all data-parallel ranks), so every layout and micro-batch count gives the same loss and gradients. With data.document_boundaries too, rows are packed from whole documents (conversations) and padded, so a row never splits one (docs/data.md). false: every target counts and masks beside the shards are not read."));
}

void add_sample_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<int>("sample.tokens", NDT_REF(sample_tokens), "Tokens of text generated at the end of training; 0: none."));
  f.push_back(field<std::string>("sample.prompt", NDT_REF(sample_prompt), "Text the sample continues (bytes, for byte-level models)."));
  f.push_back(field<float>("sample.temperature", NDT_REF(temperature), "Sampling temperature; 0 picks the most likely token."));
  f.push_back(field<int>("sample.top_k", NDT_REF(top_k), "Sample among the k most likely tokens; 0: all."));
}

void add_precision_keys(std::vector<ConfigKey>& f) {
  ConfigKey compute;
  compute.key = "precision.compute";
  compute.doc = "Compute dtype of the matmuls and of the activations blocks keep for backward (docs/precision.md): "
                "fp32, bf16 or fp16. Master weights, gradients, optimizer moments, norms, softmax, the loss and "
                "gradient reduction stay fp32; matmuls take inputs rounded to the dtype and sum in fp32 "
                "(bf16 through oneDNN's AMX/AVX512-BF16 kernels where the CPU has them).";
  compute.set = [](RunConfig& c, const std::string& v) { c.precision.compute = compute_dtype_from_config_name(v); };
  compute.get = [](const RunConfig& c) { return fmt::format("\"{}\"", compute_dtype_config_name(c.precision.compute)); };
  f.push_back(compute);

  ConfigKey reduce;
  reduce.key = "precision.reduce_dtype";
  reduce.doc = "What the data-parallel gradient reductions (DDP's all-reduce, ZeRO's and FSDP's reduce-scatter) send: "
               "fp32, or bf16 (half the bytes; every partial sum is rounded to bf16, so the result depends on the "
               "number of ranks more than in fp32). Gradients are accumulated and the optimizer runs in fp32 either way. "
               "HSDP's all-reduce over replicas, tensor and pipeline parallel traffic stay fp32.";
  reduce.set = [](RunConfig& c, const std::string& v) { c.reduce_dtype = reduce_dtype_from_config_name(v); };
  reduce.get = [](const RunConfig& c) { return fmt::format("\"{}\"", compute_dtype_config_name(c.reduce_dtype)); };
  f.push_back(reduce);
  f.push_back(field<bool>("precision.fp8", NDT_REF(precision.fp8), "The blocks' linear layers in fp8 (emulated exactly on CPU; docs/precision.md): inputs and weights rounded to e4m3, output gradients to e5m2, each tensor at a power-of-two scale from its amax history (delayed scaling), products summed in fp32. Needs precision.compute = \"bf16\" and widths divisible by 16 per tensor-parallel rank. The output layer stays bf16."));
  f.push_back(field<int>("precision.fp8_amax_history", NDT_REF(precision.fp8_scaling.amax_history_len), "Steps of amax history each fp8 tensor's scale is computed from."));
  f.push_back(field<int>("precision.fp8_margin", NDT_REF(precision.fp8_scaling.margin), "fp8 scales leave 2^margin of headroom above the amax."));
  ConfigKey amax_algo;
  amax_algo.key = "precision.fp8_amax_algo";
  amax_algo.doc = "Which amax of the history sets an fp8 scale: max (the window's largest) or most_recent.";
  amax_algo.set = [](RunConfig& c, const std::string& v) {
    NDT_CHECK(v == "max" || v == "most_recent", "precision.fp8_amax_algo = \"{}\" is not max or most_recent", v);
    c.precision.fp8_scaling.algo = v == "max" ? Fp8ScalingConfig::AmaxAlgo::max : Fp8ScalingConfig::AmaxAlgo::most_recent;
  };
  amax_algo.get = [](const RunConfig& c) {
    return std::string(c.precision.fp8_scaling.algo == Fp8ScalingConfig::AmaxAlgo::max ? "\"max\"" : "\"most_recent\"");
  };
  f.push_back(amax_algo);
  f.push_back(enum_field("precision.loss_scaling", NDT_REF(loss_scaling), loss_scaling_from_name, loss_scaling_name,
                       "Dynamic loss scaling (fp16's small gradients would flush to zero): auto (on with precision.compute = fp16, off otherwise), dynamic, or off. The loss is multiplied by the scale before backward; a step whose gradients hold an inf or NaN on any rank is skipped (not applied, counted, logged) and the scale multiplied by precision.loss_scale.backoff_factor; after growth_interval clean steps it grows by growth_factor. Saved in checkpoints."));
  f.push_back(field<double>("precision.loss_scale.initial_scale", NDT_REF(loss_scale.initial_scale), "The loss scale at step 1."));
  f.push_back(field<double>("precision.loss_scale.growth_factor", NDT_REF(loss_scale.growth_factor), "Scale growth after growth_interval clean steps (> 1)."));
  f.push_back(field<double>("precision.loss_scale.backoff_factor", NDT_REF(loss_scale.backoff_factor), "Scale factor on an overflow, in (0, 1)."));
  f.push_back(field<int>("precision.loss_scale.growth_interval", NDT_REF(loss_scale.growth_interval), "Clean steps in a row before the scale grows."));
  f.push_back(field<double>("precision.loss_scale.min_scale", NDT_REF(loss_scale.min_scale), "Smallest scale; an overflow at this scale stops the run like any non-finite step."));
  f.push_back(field<double>("precision.loss_scale.max_scale", NDT_REF(loss_scale.max_scale), "Largest scale."));
}

void add_debug_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<int64_t>("debug.nonfinite_gradient_step", NDT_REF(nonfinite_gradient_step), "Fault injection: at this step (1-based; 0: never), after backward, one gradient element on rank debug.nonfinite_gradient_rank becomes +inf, as an fp16 overflow would. Shows the loss scaler (or the non-finite stop) at work on any layout."));
  f.push_back(field<int>("debug.nonfinite_gradient_rank", NDT_REF(nonfinite_gradient_rank), "The world rank debug.nonfinite_gradient_step corrupts."));
  f.push_back(field<std::string>("debug.corrupt_batches", NDT_REF(corrupt_batches), "Fault injection: \"FIRST:COUNT\" replaces the inputs and targets of training batches FIRST .. FIRST+COUNT-1 (0-based data positions, on every rank) with random tokens: a corrupted data window, the loss spike stability.on_spike defends against (docs/stability.md). Empty: none."));
}

void add_stability_keys(std::vector<ConfigKey>& f) {
  f.push_back(enum_field("stability.on_spike", NDT_REF(on_spike), spike_action_from_name, spike_action_name,
                       "What a loss or gradient-norm spike (see stability.spike_*) does: warn (a log line and a metrics event; the update is applied), skip (the update is not applied on any rank; the batch is consumed), or rollback (reload the newest checkpoint, skip the data window since it, continue; needs checkpoint.every > 0)."));
  f.push_back(enum_field("stability.on_nonfinite", NDT_REF(on_nonfinite), nonfinite_action_from_name, nonfinite_action_name,
                       "What a NaN or infinite loss or gradient norm on any rank does (never applied): stop (save the last finite state and end the run with an error), skip (go on with the next batch), or rollback (as stability.on_spike)."));
  f.push_back(field<int>("stability.spike_window", NDT_REF(spike.window), "Applied steps whose loss and gradient norm a step is compared with."));
  f.push_back(field<int>("stability.spike_min_samples", NDT_REF(spike.min_samples), "Steps in the window before any spike is called."));
  f.push_back(field<double>("stability.spike_zscore", NDT_REF(spike.zscore), "A spike is above the window's mean + this many standard deviations ..."));
  f.push_back(field<double>("stability.spike_min_increase", NDT_REF(spike.min_increase), "... and a loss above the mean by at least this fraction (0.25: 25%)."));
  f.push_back(field<double>("stability.spike_norm_min_increase", NDT_REF(spike.norm_min_increase), "... and a gradient norm above the mean by at least this fraction (1: twice the mean; clean norms have heavier tails than losses)."));
  f.push_back(field<int64_t>("stability.rollback_extra_batches", NDT_REF(rollback_extra_batches), "A rollback skips the batches since the checkpoint up to the spike's, and this many after it (a corrupted window is often longer than the batch that showed it; PaLM skipped a few hundred)."));
  f.push_back(field<int>("stability.max_rollbacks", NDT_REF(max_rollbacks), "Rollbacks allowed within stability.rollback_window steps; one more ends the run with an error naming the newest checkpoint."));
  f.push_back(field<int64_t>("stability.rollback_window", NDT_REF(rollback_window), "The window, in steps, stability.max_rollbacks counts over."));
  f.push_back(field<float>("stability.rollback_lr_factor", NDT_REF(rollback_lr_factor), "After a rollback, the learning rate is multiplied by this for stability.rollback_lr_steps steps (1: unchanged)."));
  f.push_back(field<int64_t>("stability.rollback_lr_steps", NDT_REF(rollback_lr_steps), "Steps after a rollback that run at stability.rollback_lr_factor x the scheduled learning rate."));
}

void add_parallel_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<int>("parallel.pp", NDT_REF(mesh.pp), "Pipeline-parallel ranks (mesh axis pp, outermost): the model's units split into pp x pp_virtual_stages contiguous chunks, chunk c on pp rank c mod pp (zb_v and dualpipev: in a V, rank r holding chunks r and 2 pp - 1 - r); the micro-batches of a step (train.batch_size / (train.micro_batch_size x data-parallel size)) flow through them in the order of parallel.pp_schedule. Composes with DDP, ZeRO-1/2/3 (FSDP, HSDP) and tensor parallelism (docs/pipeline.md)."));
  f.push_back(enum_field("parallel.pp_schedule", NDT_REF(pp_schedule), pipeline_schedule_from_name, pipeline_schedule_name,
                       "Pipeline schedule: gpipe (every forward, then every backward; holds m micro-batches' activations), 1f1b (holds at most pp), interleaved_1f1b (pp_virtual_stages >= 2 chunks per rank, the micro-batch count a multiple of pp; bubble / v), zb_h1 (zero bubble: weight gradients deferred into the bubble), zb_v (zero bubble V: pp_virtual_stages = 2 chunks per rank in a V, rank 0 holding the first and the last; about half zb_h1's bubble at 1f1b's activations), dualpipev (DeepSeek's DualPipeV on the same V, forward and backward pairs run one after the other on a CPU), seq1f1b (Seq1F1B: each micro-batch cut into parallel.pp_seq_chunks sequence chunks that flow as separate units, 1f1b's order with each micro-batch's chunks backward last first; about 1 / k of 1f1b's activations per unit in flight)."));
  f.push_back(field<int>("parallel.pp_virtual_stages", NDT_REF(pp_virtual_stages), "Chunks of the model per pp rank (interleaved_1f1b: 2 or more; zb_v and dualpipev: 2; the other schedules: 1)."));
  f.push_back(field<int>("parallel.pp_seq_chunks", NDT_REF(pp_seq_chunks), "Sequence chunks per micro-batch, k (parallel.pp_schedule = \"seq1f1b\": 2 or more, train.seq_len divisible by it; the other schedules: 1). A chunk's attention reads the keys and values of its micro-batch's earlier chunks. Not with parallel.cp > 1, document boundaries, mixture of experts, activation checkpointing or a precision.compute other than fp32."));
  f.push_back(field<std::string>("parallel.pp_layers", NDT_REF(pp_layers), "Blocks of each pipeline chunk, comma-separated (e.g. \"3,3\"); the first chunk also holds the embedding, the last the final norm, output layer and loss. Empty: balanced by a cost model (the training FLOPs of each block and of the output layer)."));
  f.push_back(enum_field("parallel.layout", NDT_REF(layout), layout_mode_from_name, layout_mode_name,
                       "manual: the layout the parallel.* keys (and train.micro_batch_size, train.activation_checkpointing, offload.*) give. auto: at start-up `ndtrain train` searches every layout of its world size as `ndtrain plan` does (mesh axes, ZeRO stage, sequence parallel, cp mode, micro-batch, recompute, pipeline schedule, offload) on parallel.layout_device within the device's memory, and trains with the fastest predicted; the layout keys the config gives explicitly are kept as constraints (docs/planner.md). Not with parallel.pp_layers or parallel.pp_schedule = \"seq1f1b\"."));
  f.push_back(field<std::string>("parallel.layout_device", NDT_REF(layout_device), "With parallel.layout = \"auto\": the device profile the search predicts with: cpu (this machine, measured by rank 0 for the ranks on its node), a built-in GPU profile (a100-80g, h100-sxm, h200, b200) or a device file (TOML, e.g. one `ndtrain plan --calibrate` writes; docs/planner.md)."));
  f.push_back(field<int64_t>("parallel.layout_check_steps", NDT_REF(layout_check_steps), "With parallel.layout = \"auto\": after the first step (which warms up), the median of this many steps' times is printed against the predicted step time and recorded in metrics.jsonl (record layout_check) and the run report."));
  f.push_back(field<float>("parallel.layout_expert_load", NDT_REF(layout_expert_load), "With parallel.layout = \"auto\" and an MoE model: how unevenly the router spreads its rows over the ep ranks, as the search prices it: the most loaded ep rank's expert rows over the mean rank's (1: balanced; at most the ep ranks). A run records its own as moe.expert_load in metrics.jsonl (docs/moe.md); `ndtrain plan --expert-load` is the same figure."));
  f.push_back(field<int>("parallel.dp_replicate", NDT_REF(mesh.dp_replicate), "Data-parallel replicas (mesh axis dp_replicate); 0: all ranks the other axes leave."));
  f.push_back(field<int>("parallel.dp_shard", NDT_REF(mesh.dp_shard), "Sharded data-parallel ranks (mesh axis dp_shard): ZeRO shards over them (needs parallel.zero_stage >= 1); with dp_replicate > 1 too, that is HSDP. 0: automatic: 1 under DDP; with ZeRO, the data-parallel ranks of one node (shard inside a node, replicate across nodes: HSDP), or every data-parallel rank when the nodes do not split them evenly or offload.params = \"disk\" (on one node: FSDP over all)."));
  f.push_back(field<int>("parallel.cp", NDT_REF(mesh.cp), "Context-parallel ranks (mesh axis cp): every sequence split over them (parallel.cp_chunks), only attention communicating (parallel.cp_mode); parameters replicated over cp, gradients reduced (and ZeRO/FSDP sharded) over dp_shard x cp. train.seq_len must divide into 2 x cp chunks (zigzag) or cp (contiguous). Composes with DDP, ZeRO-1/2/3, tensor and sequence parallel and pipeline parallel (docs/context_parallel.md)."));
  f.push_back(field<int>("parallel.ep", NDT_REF(mesh.ep), "Expert-parallel ranks (docs/moe.md): an MoE model's routed experts split over ep ranks borrowed from the data-parallel ranks parallel.dp_shard x cp (which it must divide; with zero_stage 0 set parallel.dp_shard to the ranks ep may use), tokens sent to their experts and back by all-to-all. Expert weights are reduced over the other data-parallel ranks (edp), everything else over all of them; ZeRO/FSDP shard the experts over the dp_shard x cp / ep ranks holding the same experts (edp_shard). Needs model.n_experts divisible by ep."));
  f.push_back(enum_field("parallel.cp_mode", NDT_REF(cp_mode), cp_mode_from_name, cp_mode_name,
                       "Context-parallel attention: ring (keys and values passed around the cp ranks, the next block's transfer overlapped with the current block's compute; any head count), ulysses (all-to-all from token-split to head-split and back around a local attention; this rank's heads and KV heads must divide by cp) or usp (both: Ulysses inside groups of parallel.cp_ulysses consecutive cp ranks, ring attention across the cp / cp_ulysses groups; this rank's heads and KV heads must divide by cp_ulysses)."));
  f.push_back(field<int>("parallel.cp_ulysses", NDT_REF(mesh.cp_ulysses), "With parallel.cp_mode = \"usp\": the Ulysses ranks of each group (mesh group cp_ulysses: consecutive cp ranks, inside a node), dividing parallel.cp and strictly between 1 and it; the rest of cp is the ring (cp_ring). Each ring position holds the runs of a cp / cp_ulysses ring's parallel.cp_chunks layout, split contiguously over its cp_ulysses ranks. 1 under ring and ulysses (docs/context_parallel.md)."));
  f.push_back(enum_field("parallel.cp_chunks", NDT_REF(cp_chunks), cp_chunks_from_name, cp_chunks_name,
                       "How a sequence is cut over the cp ranks: zigzag (2 x cp chunks, rank r holds chunks r and 2cp-1-r: equal causal attention work on every rank) or contiguous (cp chunks, rank r holds chunk r: the last rank does most of the work)."));
  f.push_back(field<int>("parallel.tp", NDT_REF(mesh.tp), "Tensor-parallel ranks (mesh axis tp, innermost): attention split by heads, the MLP by hidden units, embedding and output layer by vocabulary (Megatron). Heads, KV heads, d_model, d_ff and vocab_size must divide by it."));
  f.push_back(enum_field("parallel.dp_reduction", NDT_REF(dp_reduction), dp_reduction_from_name, dp_reduction_name,
                         "DDP's gradient all-reduce when the data-parallel ranks span nodes: flat (one all-reduce over them all), hierarchical (a reduce-scatter inside each node, an all-reduce of each shard across the nodes, an all-gather inside: fewer bytes over the nodes' links), or auto (both timed on a bucket at start-up, the faster kept; the run header says which and the times). On one node the reduction is flat. Gradients reduced in bf16 (precision.reduce_dtype) stay flat (docs/multinode.md)."));
  f.push_back(field<bool>("parallel.allow_cross_node_tp", NDT_REF(allow_cross_node_tp), "Let tensor-parallel (and Ulysses context-parallel, USP's cp_ulysses) groups span nodes. They communicate in every block and need a node's own links: by default a run whose tp or Ulysses cp groups cross nodes is refused before step 1, naming the axis and the hosts (docs/multinode.md)."));
  f.push_back(field<bool>("parallel.sequence_parallel", NDT_REF(sequence_parallel), "With tp > 1: run the norms and residual adds on tokens split over tp (all-gather / reduce-scatter instead of all-reduce; same volume, activations of those regions / tp). train.seq_len must divide by tp."));
  f.push_back(field<int>("parallel.zero_stage", NDT_REF(zero_stage), "0: DDP (everything replicated). 1: AdamW moments sharded over dp_shard. 2: gradients sharded too (each block's are reduce-scattered right after its backward, so they are never whole). 3: parameters sharded too (FSDP), gathered per block when used."));
  f.push_back(field<bool>("parallel.reshard_after_forward", NDT_REF(reshard_after_forward), "ZeRO-3: free a block's gathered parameters after its forward and gather them again for its backward; false keeps them (less communication, more memory)."));
  f.push_back(field<bool>("parallel.prefetch", NDT_REF(prefetch), "ZeRO-3: start the next block's all-gather before computing the current one."));
  f.push_back(field<double>("parallel.bucket_mb", NDT_REF(bucket_mb), "Data-parallel gradient bucket size in MiB: each bucket's all-reduce starts when backward has finished its gradients."));
}

void add_checkpoint_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<std::string>("checkpoint.dir", NDT_REF(checkpoint_dir), "Folder of the run's checkpoints (step-NNNNNNNN each); empty: <runtime.out_dir>/checkpoints (no checkpoints when both are empty)."));
  f.push_back(field<int64_t>("checkpoint.every", NDT_REF(checkpoint_every), "Save every this many steps; 0: only at the end (checkpoint.save_on_exit)."));
  f.push_back(field<int>("checkpoint.keep_last", NDT_REF(keep_last), "Committed checkpoints kept; older ones are removed after each save."));
  f.push_back(field<bool>("checkpoint.async", NDT_REF(checkpoint_async), "Write periodic saves on a background thread from a host snapshot while training continues (at most one in flight)."));
  f.push_back(field<bool>("checkpoint.save_on_exit", NDT_REF(save_on_exit), "Save at the end of the run, and when a rank receives SIGTERM (the run then stops after the step)."));
  f.push_back(field<std::string>("checkpoint.resume", NDT_REF(resume), "Resume from this checkpoint (a checkpoint directory, a folder of them or a run folder: its newest), or \"latest\" (newest under checkpoint.dir); any mesh, ZeRO stage or tp size (`ndtrain train --resume`)."));
  f.push_back(field<bool>("checkpoint.overwrite", NDT_REF(overwrite), "Allow this run to delete checkpoints it does not continue from: those of an earlier run when starting afresh in a folder that holds some, or those newer than the step it resumes from (`ndtrain train --overwrite`). Without it such a run stops before step 1 and names both ways forward."));
}

// offload.optimizer and offload.params: "none" or "disk".
ConfigKey tier_field(const std::string& key, bool RunConfig::*member, std::string doc) {
  ConfigKey f;
  f.key = key;
  f.doc = std::move(doc);
  f.set = [key, member](RunConfig& c, const std::string& v) {
    NDT_CHECK(v == "none" || v == "disk", "{} = \"{}\" is not none or disk", key, v);
    c.*member = v == "disk";
  };
  f.get = [member](const RunConfig& c) { return std::string(c.*member ? "\"disk\"" : "\"none\""); };
  return f;
}

void add_offload_keys(std::vector<ConfigKey>& f) {
  f.push_back(tier_field("offload.optimizer", &RunConfig::offload_optimizer, "ZeRO-Offload with the disk as the capacity tier (docs/offload.md): none, or disk: each rank's AdamW moments (its ZeRO shard: needs parallel.zero_stage >= 1) live in swap files under offload.dir and the optimizer step streams them chunk by chunk, reading ahead and writing behind while it updates. The same numbers as in memory, bit for bit; 8 bytes a parameter (/ dp_shard) leave memory."));
  f.push_back(tier_field("offload.params", &RunConfig::offload_params, "ZeRO-Infinity's parameter offload: none, or disk: with FSDP (parallel.zero_stage = 3) and offload.optimizer = \"disk\", each rank's parameter shards (the fp32 master) and gradient shards live in swap files too: a block's shards are read offload.prefetch units ahead of its all-gather and freed after it, its gradient shards written after its reduce-scatter, so only the blocks in flight are in memory. Not with dp_replicate > 1 (HSDP)."));
  f.push_back(field<std::string>("offload.dir", NDT_REF(offload_dir), "Folder of the swap files (a fast local disk); each rank uses and locks rank-NNNNN in it, and the files are removed when the run ends. Empty: <runtime.out_dir>/offload. A run checks before step 1 that the disk has room for its swap files."));
  f.push_back(field<double>("offload.chunk_mb", NDT_REF(offload_chunk_mb), "Size of the chunks swap files are read and written in (MiB; a multiple of 4 KiB, from 4 KiB to 1 GiB). The optimizer step holds (offload.prefetch + 2) chunks per streamed file in memory."));
  f.push_back(field<int>("offload.prefetch", NDT_REF(offload_prefetch), "How far reads run ahead: chunks of the optimizer step's stream, and with offload.params = \"disk\" units whose parameter shards are read ahead of their all-gather (0 to 64)."));
  f.push_back(enum_field("offload.io", NDT_REF(offload_io), offload::io_backend_from_name, offload::io_backend_name,
                         "How swap files are read and written: io_uring (Linux's asynchronous I/O rings, liburing) or threads (a pool of threads running blocking pread/pwrite); both with O_DIRECT where the filesystem allows it. docs/offload.md has the measurements."));
}

void add_runtime_keys(std::vector<ConfigKey>& f) {
  f.push_back(field<int>("runtime.threads", NDT_REF(threads), "Compute threads of this rank (OpenMP and OpenBLAS); 0: SLURM_CPUS_PER_TASK under Slurm, else this node's cores divided among the ranks on this node (each node its own count; at least 1)."));
  f.push_back(field<double>("runtime.peak_gflops", NDT_REF(peak_gflops), "Hardware peak for MFU in GFLOP/s; 0: measure it with the built-in FMA calibration."));
  f.push_back(field<double>("runtime.comm_timeout_s", NDT_REF(comm_timeout_s), "A collective not complete after this many seconds aborts the job, naming the operation, mesh axis, size and step."));
  f.push_back(field<std::string>("runtime.out_dir", NDT_REF(out_dir), "Folder for metrics.jsonl (one JSON record per step, validation and summary); empty: no metrics file."));
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> table = [] {
    std::vector<ConfigKey> f;
    add_model_keys(f);
    add_lora_keys(f);
    add_train_keys(f);
    add_optim_keys(f);
    add_data_keys(f);
    add_sample_keys(f);
    add_precision_keys(f);
    add_debug_keys(f);
    add_stability_keys(f);
    add_parallel_keys(f);
    add_checkpoint_keys(f);
    add_offload_keys(f);
    add_runtime_keys(f);
    return f;
  }();
  return table;
}

const ConfigKey* find_config_key(const std::string& key) {
  for (const ConfigKey& f : config_keys()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

}  // namespace ndt
