// A tied embedding under pipeline parallelism: the first chunk holds the token
// embedding, the last chunk the output layer, and with model.tied_embeddings they are
// one matrix. Where the two chunks live on different pp ranks (the loop placement: the
// first and last rank) the head's rank keeps a copy (Parameter::pipeline_copy, placed by
// parallelize()), so each computes its own part of the gradient. Under the V placement
// both chunks are on rank 0: one parameter, no copy, nothing to sum.
// Splits: nothing. Communicates: after the data-parallel sync of a step, one
// all-reduce of the embedding's gradient (whole, or this rank's shard: both ranks
// shard it alike) between the embedding's and the head's pp ranks, over a communicator
// of those two (the other pp ranks sit alone in theirs); nothing under the V placement.
#pragma once

#include "comm/communicator.h"
#include "model/parameter.h"
#include "parallel/data/gradient_sync.h"
#include "parallel/pipeline/schedule.h"

#include <memory>

namespace ndt {

class TiedEmbedding {
 public:
  // Collective over pp (it splits the pp communicator); the shape gives the placement.
  TiedEmbedding(Communicator& pp, const PipelineShape& shape);
  // The embedding's gradient summed over its two ranks, in place, on the embedding's
  // and the head's pp ranks (nothing on the others, with pp = 1 or under the V
  // placement). After the data-parallel sync.
  void sum_gradients(const ParameterStore& store, GradientSync& sync);

 private:
  std::unique_ptr<Communicator> ends_;  // the embedding's and the head's pp ranks
};

}  // namespace ndt
