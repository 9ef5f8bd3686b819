// The attention core of a Seq1F1B sequence chunk (model/sequence_chunks.h): chunk s's
// queries against the keys of chunks 0..s of the same micro-batch, causal, merged by
// log-sum-exp with ring attention's span kernels (kernels/cpu/attention_span.h), the
// earlier chunks' keys and values read from their contexts in place of other ranks'
// blocks. No probabilities are kept: backward recomputes them from q, k and the merged
// log-sum-exp, adding dq and the chunk's own dK/dV, and the earlier chunks' dK/dV to
// the rank's key/value sums, from which each chunk takes its own in its backward (the
// last chunk's backward runs first and zeroes them). Communicates nothing.
#pragma once

#include "model/activations.h"
#include "model/context_parallel_attention.h"
#include "model/sequence_chunks.h"

#include <cstdint>

namespace ndt {

// a.out, a.lse of block `layer`'s chunk (a.att unused); a.scratch holds
// sequence_chunk_scratch_floats.
void sequence_chunk_attention_forward(const AttentionForward& a, const SequenceChunk& chunk, int layer);
// Adds (+=) into a.dq, a.dk, a.dv (the latter two with what later chunks left in the
// sums for this one) and into the sums of the earlier chunks.
void sequence_chunk_attention_backward(const AttentionBackward& a, const SequenceChunk& chunk, int layer);

// Workspace scratch for a chunk of B x T rows of NH heads: forward's partial output and
// log-sum-exp (backward's row term fits in it).
int64_t sequence_chunk_scratch_floats(int64_t B, int64_t T, int64_t NH, int64_t HS);

}  // namespace ndt
