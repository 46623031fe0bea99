// One forward step's input (ForwardBatch: a flat batch of tokens from any number of sequences)
// and what is derived from it once per step (StepPlan: the decode rows' block tables and lengths,
// the prefill attention spans, the chunks of cached context to gather), reused by every layer.
//
// The contract with the engine: a sequence's new tokens are consecutive rows; decoding sequences
// (exactly one new token) come first, so rows [0, num_decode_tokens) take the absorbed decode path
// and the rest the materialised prefill path. Token j of a sequence with num_cached tokens already
// in the cache has position num_cached + j, and its latent goes to slot
// block_table[pos / page_size] · page_size + pos % page_size (slot_mapping states it, and it is
// checked). Context of a prefilling sequence is gathered from the cache in chunks of at most
// context_chunk_tokens latents, each chunk attended non-causally and merged by LSE.
#pragma once

#include <cstdint>
#include <vector>

namespace mla::model {

struct SequenceSlice {
  int first_token = 0;               // its tokens are rows [first_token, first_token + num_tokens)
  int num_tokens = 0;                // new tokens this step
  int num_cached = 0;                // tokens of it already in the cache: positions [0, num_cached)
  std::vector<int32_t> block_table;  // its pages in order; covers num_cached + num_tokens tokens
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> positions;        // [num_tokens]
  std::vector<int64_t> slot_mapping;     // [num_tokens]: cache slot (page · page_size + offset)
  std::vector<SequenceSlice> sequences;  // decoding sequences first
  std::vector<int32_t> logit_rows;       // rows whose logits are returned, in this order
};

// Queries [q_begin, q_begin + q_count) attend to keys [k_begin, k_begin + k_count); causal as in
// ref::attention (bottom-right aligned).
struct AttentionSpan {
  int q_begin = 0;
  int q_count = 0;
  int k_begin = 0;
  int k_count = 0;
  bool causal = false;
};

// Cached latents gathered into one workspace and attended by the prefill rows.
struct ContextChunk {
  std::vector<int64_t> slots;        // [gathered] cache slots, in workspace order
  std::vector<AttentionSpan> spans;  // q rows relative to the prefill block; k rows in workspace
};

struct StepPlan {
  int num_tokens = 0;
  int num_decode_tokens = 0;  // rows [0, num_decode_tokens): one per decoding sequence
  int page_size = 0;
  int num_pages = 0;
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int64_t> slot_mapping;
  // Decode rows (the decode op's inputs): keys each row sees (the cache, itself included), and
  // the block table [num_decode_tokens, decode_max_pages] (unused entries 0, never read).
  std::vector<int32_t> decode_seqlens;
  std::vector<int32_t> decode_block_table;
  int decode_max_pages = 0;
  int decode_num_heads =
      0;  // query heads of the decode op (set by the model: plan it in begin_step)
  // Prefill rows: causal self-attention among each sequence's new tokens (rows relative to row
  // num_decode_tokens), then each context chunk.
  std::vector<AttentionSpan> prefill_spans;
  std::vector<ContextChunk> context_chunks;
  std::vector<int32_t> logit_rows;
};

struct CacheGeometry {
  int num_pages = 0;
  int page_size = 64;
};

// A decode-only plan padded to `batch` rows for a step graph (every step of a bucket then has the
// same shapes): padding rows read token 0 at position 0, decode nothing (seqlen 0) and write no
// latent (slot -1); the block table is `max_pages` wide; logit rows are the plan's, then padding
// rows, `batch` in all, so the first plan.logit_rows.size() logits are the plan's.
StepPlan pad_decode_plan(const StepPlan& plan, int batch, int max_pages);

// Validates the batch against the cache and the vocabulary (mla::Error naming the offending
// sequence/row) and derives the plan. Pure: no backend, no memory beyond the plan.
StepPlan make_step_plan(const ForwardBatch& batch, const CacheGeometry& cache, int vocab_size,
                        int context_chunk_tokens);

}  // namespace mla::model
