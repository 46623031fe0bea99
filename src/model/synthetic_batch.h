// Synthetic forward batches of a given shape, for the start-up memory profile and the step
// benchmark: decode rows first (each with `decode_context` tokens cached), then prefill
// sequences (the first with `first_prefill_context` tokens of cached context, the others none).
// Pages are handed out 0, 1, 2, ... per sequence in order, so every sequence owns its pages and
// `num_pages` says how large a cache the batch needs. Token ids are a fixed pseudo-random walk
// over the vocabulary (never all equal, never out of range); logit rows are every decode row and
// the last row of each prefill sequence, as the engine asks.
#pragma once

#include <cstdint>
#include <vector>

#include "model/step_plan.h"

namespace mla::model {

struct SyntheticBatchShape {
  int decode_rows = 0;
  int decode_context = 0;  // cached tokens of every decode row (it reads this many + 1 keys)
  int prefill_tokens = 0;  // split as evenly as possible over prefill_sequences
  int prefill_sequences = 0;
  int first_prefill_context = 0;
};

struct SyntheticBatch {
  ForwardBatch batch;
  int num_pages = 0;                  // pages the batch's block tables use: [0, num_pages)
  int64_t decode_context_tokens = 0;  // keys the decode rows (one-token sequences) read, summed
};

SyntheticBatch make_synthetic_batch(const SyntheticBatchShape& shape, int vocab_size,
                                    int page_size = 64, uint64_t seed = 1);

// The steps the memory profile runs: the largest the engine will run. (1) A prefill of
// max_num_batched_tokens over a few sequences (at least min(4, budget), more when one cannot hold
// max_model_len tokens), the first with context up to max_model_len; (2) a mixed step: half the
// budget (at most max_num_seqs − 1 rows) decoding, the rest one prefill (or several) with context;
// (3) a decode-only step of max_num_seqs rows at `decode_context` tokens each. The last one is the
// decode step (run last: it is where a step graph is captured).
std::vector<SyntheticBatchShape> memory_profile_shapes(int max_num_batched_tokens, int max_num_seqs,
                                                       int max_model_len, int decode_context = 256);

}  // namespace mla::model
