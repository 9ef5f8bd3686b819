// `ndtrain prepare --tokenizer FILE`: text documents to token shards with a real
// tokenizer, streaming (memory bounded by one shard's buffer per split and one batch of
// documents, whatever the corpus size). Documents are a file each, a line each, or a
// JSONL field each; a batch of them is encoded in parallel on the threads, then written
// in input order, each preceded by the separator token (the tokenizer's EOS by default,
// as llm.c's shards put <|endoftext|> before every document). A document goes to
// validation when a hash of its index falls below val_fraction (a split by documents).
// Shards of shard_tokens tokens: train_NNNNNN.bin and val_NNNNNN.bin, uint16 (version 1)
// when the vocabulary fits, else uint32 (version 2); tokenizer_info.json and the
// tokenizer's files beside them (tokenizer_record.h). With --format chat or
// prompt-response the units are conversations from JSONL, rendered by a chat template,
// and each shard gets its loss mask beside it (loss_mask.h): 1 on assistant turns.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {

struct TokenPrepareOptions {
  std::string out_dir;
  std::string tokenizer;
  std::string format = "text";     // text | chat | prompt-response (data/prepare_source.h)
  std::string chat_template = "auto";  // with chat | prompt-response (data/chat_template.h)
  std::string documents = "file";  // file | line | jsonl
  std::string jsonl_field = "text";
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
  std::string separator;  // a token's text; empty: the tokenizer's EOS
  int threads = 0;        // 0: every core
  bool overwrite = false;
  bool special_in_text = false;  // recognise special tokens written in documents (off: they are plain text)
  std::ostream* progress = nullptr;  // a progress line (MB/s, tokens, ETA), rewritten in place
};

struct TokenPrepareResult {
  std::vector<std::string> train_shards, val_shards;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t documents = 0, val_documents = 0;
  int64_t bytes = 0;
  double seconds = 0;
  std::string dtype;  // "uint16" or "uint32"
  std::string chat_template;   // the template used and why ("" for --format text)
  int64_t counted_tokens = 0;  // tokens whose loss-mask byte is 1 (chat formats)
};

// Throws ndt::Error naming the file or setting at fault: a bad tokenizer, a separator it
// lacks, a JSONL line that is not an object with a string field (file and line), a role
// the chat template does not know (file and line), an unknown format or template, an
// empty split, existing shards without overwrite, shard_tokens < 1.
TokenPrepareResult prepare_token_shards(const std::vector<std::string>& files, const TokenPrepareOptions& options);

}  // namespace ndt
