// Seq1F1B's sequence chunks on the model's side (the schedule:
// parallel/pipeline/seq1f1b.h). A micro-batch's sequences are cut into k chunks of
// T / k consecutive tokens and each chunk is a context of its own
// (MicroBatchContext::sequence says which), so a pipeline holds 1 / k of a
// micro-batch's activations per unit of work. Everything but attention is token-local
// and runs on a chunk unchanged; a chunk's attention reads the keys and values of the
// same micro-batch's earlier chunks from their contexts, which stay alive until after
// its backward (model/sequence_chunk_attention.h).
#pragma once

#include <vector>

namespace ndt {

struct MicroBatchContext;

struct SequenceChunk {
  int index = 0;  // which chunk of its micro-batch's sequences the context holds
  int count = 1;  // k, chunks per sequence; 1: the context holds whole sequences
  // The contexts of chunks 0..index-1 of the same micro-batch (set by whoever schedules
  // the chunks; not owned).
  std::vector<const MicroBatchContext*> earlier;
  // Per block (null for blocks of other pipeline ranks): the dK and dV sums of chunks
  // 0..count-2 of the micro-batch whose backward runs, [count - 1][2][N x KD floats]
  // (sequence_chunk_sum_floats): a chunk's backward adds its queries' share to the
  // earlier chunks' and takes its own. Shared by every micro-batch of a rank (one
  // micro-batch's chunks run backward at a time), not owned.
  std::vector<float*> key_value_sums;
  bool active() const { return count > 1; }
};

}  // namespace ndt
