// The record `ndtrain prepare --tokenizer` leaves beside its shards, so a run (and
// `ndtrain generate`) decodes with the tokenizer that made them: tokenizer_info.json
// (the tokenizer's kind, vocabulary size, separator token, and each file's name and
// SHA-256) and a copy of the tokenizer file(s) in tokenizer/.
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>

namespace ndt {

inline constexpr const char* kTokenizerRecordFile = "tokenizer_info.json";

// Writes the record into out_dir (atomically), copying the tokenizer's files.
void write_tokenizer_record(const std::string& out_dir, const tok::Tokenizer& tokenizer, int32_t separator,
                            const std::string& dtype);

// The tokenizer file recorded beside `shard` (in its folder), or nullopt when the folder
// holds no record. Throws naming the file when a copied file's hash does not match.
std::optional<std::string> recorded_tokenizer(const std::string& shard);

// The document separator token recorded beside `shard` (the one `prepare` wrote before
// every document), or nullopt when the folder holds no record. Throws naming the file
// when the record is malformed.
std::optional<int32_t> recorded_separator(const std::string& shard);

}  // namespace ndt
