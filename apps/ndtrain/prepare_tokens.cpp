// `ndtrain prepare --tokenizer FILE ...`: documents to token shards with a tokenizer
// (data/prepare_tokens.h); without --tokenizer prepare stays byte-level (train.cpp).
#include "apps/ndtrain/commands.h"
#include "data/prepare_tokens.h"

#include <fmt/format.h>

#include <iostream>

namespace ndt {

int run_prepare_tokens(const std::vector<std::string>& inputs, TokenPrepareOptions options) {
  options.progress = &std::cerr;
  const TokenPrepareResult r = prepare_token_shards(expand_prepare_inputs(inputs), options);
  fmt::print("prepared {} documents ({:.1f} MB in {:.1f} s, {:.1f} MB/s): {} training tokens in {} {} shard{}, {} "
             "validation tokens ({} documents) in {} shard{}, in {}\n",
             r.documents, static_cast<double>(r.bytes) / 1e6, r.seconds,
             r.seconds > 0 ? static_cast<double>(r.bytes) / 1e6 / r.seconds : 0.0, r.train_tokens,
             r.train_shards.size(), r.dtype, r.train_shards.size() == 1 ? "" : "s", r.val_tokens, r.val_documents,
             r.val_shards.size(), r.val_shards.size() == 1 ? "" : "s", options.out_dir);
  if (!r.chat_template.empty()) {
    fmt::print("chat template {}; loss masks beside the shards: {} of {} tokens count in the loss (assistant turns)\n",
               r.chat_template, r.counted_tokens, r.train_tokens + r.val_tokens);
  }
  return 0;
}

}  // namespace ndt
