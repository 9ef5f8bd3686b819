// A tied embedding under pipeline parallelism: the first stage holds the token
// embedding, the last stage the output layer, and with model.tied_embeddings they are
// one matrix. The last stage keeps a copy (Parameter::pipeline_copy, placed by
// parallelize()), so each stage computes its own part of the gradient.
// Splits: nothing. Communicates: after the data-parallel sync of a step, one
// all-reduce of the embedding's gradient (whole, or this rank's shard: both stages
// shard it alike) between the first and last pp ranks, over a communicator of those
// two (the other pp ranks sit alone in theirs).
#pragma once

#include "comm/communicator.h"
#include "model/parameter.h"
#include "parallel/data/gradient_sync.h"

#include <memory>

namespace ndt {

class TiedEmbedding {
 public:
  // Collective over pp (it splits the pp communicator).
  explicit TiedEmbedding(Communicator& pp);
  // The embedding's gradient summed over the two stages, in place, on the first and last
  // pp ranks (nothing on the others, or with pp = 1). After the data-parallel sync.
  void sum_gradients(const ParameterStore& store, GradientSync& sync);

 private:
  int pp_size_, pp_rank_;
  std::unique_ptr<Communicator> ends_;  // the first and last pp ranks
};

}  // namespace ndt
