// Documents packed into a row (data.document_boundaries, docs/data.md): where each
// position's document begins. `ndtrain prepare` writes the separator (the tokenizer's
// EOS by default) before every document, as llm.c's shards do, so a separator is the
// first token of the document that follows it, its BOS: a document starts at each
// separator, and a row's first tokens (up to its first separator) are the tail of a
// document that began before the row, which starts at position 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ndt {

// For rows [B, T] of input tokens: starts[b, t] = the largest s <= t with
// inputs[b, s] == separator, else 0.
std::vector<int32_t> document_starts(const int32_t* inputs, int B, int T, int32_t separator);

}  // namespace ndt
