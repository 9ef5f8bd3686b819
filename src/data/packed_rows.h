// Rows packed from whole documents, for loss-masked data under data.document_boundaries
// (docs/data.md): a row never splits a conversation. The documents of a dataset start at
// its separator tokens (prepare writes one before each; tokens before the first separator
// are a document too). The row from document d holds documents d, d + 1, ... while each
// fits whole in the T + 1 tokens of a row, then padding: separator tokens with mask 0 (so
// each is a document of its own and no padded target counts). A document longer than
// T + 1 tokens fills a row alone, cut to its first T + 1 tokens (too_long() counts them;
// the run header warns).
#pragma once

#include "data/dataset.h"

#include <cstdint>
#include <vector>

namespace ndt {

class DocumentIndex {
 public:
  // Scans the dataset once for `separator`. Requires data.has_masks().
  DocumentIndex(const TokenDataset& data, int32_t separator, int T);
  int64_t count() const { return static_cast<int64_t>(starts_.size()) - 1; }
  int64_t too_long() const { return too_long_; }  // documents longer than T + 1 tokens
  // The T + 1 tokens and mask bytes of the row from document d (0 <= d < count()).
  void fill(int64_t d, int32_t* tokens, uint8_t* mask) const;

 private:
  const TokenDataset& data_;
  int32_t separator_;
  int T_;
  std::vector<int64_t> starts_;  // each document's first token, then data.size()
  int64_t too_long_ = 0;
};

}  // namespace ndt
