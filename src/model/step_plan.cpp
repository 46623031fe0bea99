// Batch validation and the per-step plan; see step_plan.h.
#include "model/step_plan.h"

#include <algorithm>

#include "core/error.h"

namespace mla::model {

StepPlan make_step_plan(const ForwardBatch& batch, const CacheGeometry& cache, int vocab_size,
                        int context_chunk_tokens) {
  const int num_tokens = static_cast<int>(batch.token_ids.size());
  if (num_tokens == 0) throw_error("forward batch: no tokens");
  if (batch.positions.size() != batch.token_ids.size() ||
      batch.slot_mapping.size() != batch.token_ids.size())
    throw_error("forward batch: {} token ids but {} positions and {} slots (one each per token)",
                num_tokens, batch.positions.size(), batch.slot_mapping.size());
  MLA_CHECK_GT(context_chunk_tokens, 0);
  MLA_CHECK_GT(cache.page_size, 0);

  StepPlan plan;
  plan.num_tokens = num_tokens;
  plan.page_size = cache.page_size;
  plan.num_pages = cache.num_pages;
  plan.token_ids = batch.token_ids;
  plan.positions = batch.positions;
  plan.slot_mapping = batch.slot_mapping;
  plan.logit_rows = batch.logit_rows;

  for (int row = 0; row < num_tokens; ++row)
    if (batch.token_ids[row] < 0 || batch.token_ids[row] >= vocab_size)
      throw_error("forward batch: token id {} at row {} is outside the vocabulary (0..{})",
                  batch.token_ids[row], row, vocab_size - 1);
  for (int32_t row : batch.logit_rows)
    if (row < 0 || row >= num_tokens)
      throw_error("forward batch: logit row {} is not a row of the batch (0..{})", row,
                  num_tokens - 1);

  int next_row = 0;
  bool seen_prefill = false;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSlice& seq = batch.sequences[s];
    if (seq.first_token != next_row || seq.num_tokens < 1 ||
        seq.first_token + seq.num_tokens > num_tokens)
      throw_error(
          "forward batch: sequence {} covers rows [{}, {}) but its tokens must start at row {} "
          "(sequences tile the batch in order, at least one token each)",
          s, seq.first_token, seq.first_token + seq.num_tokens, next_row);
    next_row += seq.num_tokens;
    const bool decoding = seq.num_tokens == 1;
    if (decoding && seen_prefill)
      throw_error(
          "forward batch: sequence {} decodes (one token) after a prefilling sequence; decoding "
          "sequences come first",
          s);
    seen_prefill = seen_prefill || !decoding;
    if (seq.num_cached < 0) throw_error("forward batch: sequence {} has num_cached < 0", s);
    const int64_t length = int64_t(seq.num_cached) + seq.num_tokens;
    const int64_t pages_needed = (length + cache.page_size - 1) / cache.page_size;
    if (int64_t(seq.block_table.size()) < pages_needed)
      throw_error(
          "forward batch: sequence {} holds {} tokens but its block table lists {} pages "
          "of {} (needs {})",
          s, length, seq.block_table.size(), cache.page_size, pages_needed);
    for (int64_t p = 0; p < pages_needed; ++p)
      if (seq.block_table[p] < 0 || seq.block_table[p] >= cache.num_pages)
        throw_error(
            "forward batch: sequence {} block_table[{}] = {} is not a page of the cache "
            "(0..{})",
            s, p, seq.block_table[p], cache.num_pages - 1);
    for (int j = 0; j < seq.num_tokens; ++j) {
      const int row = seq.first_token + j;
      const int64_t position = int64_t(seq.num_cached) + j;
      if (batch.positions[row] != position)
        throw_error(
            "forward batch: row {} (sequence {}, new token {}) has position {}, expected "
            "num_cached + {} = {}",
            row, s, j, batch.positions[row], j, position);
      const int64_t slot = int64_t(seq.block_table[position / cache.page_size]) * cache.page_size +
                           position % cache.page_size;
      if (batch.slot_mapping[row] != slot)
        throw_error(
            "forward batch: row {} (sequence {}, position {}) has slot {}, but its block "
            "table puts it at {}",
            row, s, position, batch.slot_mapping[row], slot);
    }
    if (decoding) ++plan.num_decode_tokens;
  }
  if (next_row != num_tokens)
    throw_error("forward batch: sequences cover rows [0, {}) of {}", next_row, num_tokens);

  // Decode rows.
  const int num_decode = plan.num_decode_tokens;
  for (int s = 0; s < num_decode; ++s) {
    const SequenceSlice& seq = batch.sequences[s];
    const int length = seq.num_cached + 1;
    plan.decode_seqlens.push_back(length);
    plan.decode_max_pages =
        std::max(plan.decode_max_pages, (length + cache.page_size - 1) / cache.page_size);
  }
  plan.decode_block_table.assign(size_t(num_decode) * plan.decode_max_pages, 0);
  for (int s = 0; s < num_decode; ++s) {
    const SequenceSlice& seq = batch.sequences[s];
    const int pages = (plan.decode_seqlens[s] + cache.page_size - 1) / cache.page_size;
    std::copy(seq.block_table.begin(), seq.block_table.begin() + pages,
              plan.decode_block_table.begin() + size_t(s) * plan.decode_max_pages);
  }

  // Prefill rows: self-attention spans, then context pieces packed into chunks.
  for (size_t s = num_decode; s < batch.sequences.size(); ++s) {
    const SequenceSlice& seq = batch.sequences[s];
    const int q_begin = seq.first_token - num_decode;
    plan.prefill_spans.push_back({q_begin, seq.num_tokens, q_begin, seq.num_tokens, true});
    int done = 0;
    while (done < seq.num_cached) {
      if (plan.context_chunks.empty() ||
          int(plan.context_chunks.back().slots.size()) == context_chunk_tokens)
        plan.context_chunks.emplace_back();
      ContextChunk& chunk = plan.context_chunks.back();
      const int room = context_chunk_tokens - static_cast<int>(chunk.slots.size());
      const int take = std::min(room, seq.num_cached - done);
      chunk.spans.push_back(
          {q_begin, seq.num_tokens, static_cast<int>(chunk.slots.size()), take, false});
      for (int position = done; position < done + take; ++position)
        chunk.slots.push_back(int64_t(seq.block_table[position / cache.page_size]) *
                                  cache.page_size +
                              position % cache.page_size);
      done += take;
    }
  }
  return plan;
}

StepPlan pad_decode_plan(const StepPlan& plan, int batch, int max_pages) {
  MLA_CHECK_EQ(plan.num_decode_tokens, plan.num_tokens);
  MLA_CHECK(batch >= plan.num_tokens && max_pages >= plan.decode_max_pages);
  MLA_CHECK(static_cast<int>(plan.logit_rows.size()) <= batch);
  StepPlan padded = plan;
  padded.num_tokens = batch;
  padded.num_decode_tokens = batch;
  padded.token_ids.resize(batch, 0);
  padded.positions.resize(batch, 0);
  padded.slot_mapping.resize(batch, -1);
  padded.decode_seqlens.resize(batch, 0);
  padded.decode_max_pages = max_pages;
  padded.decode_block_table.assign(static_cast<size_t>(batch) * max_pages, 0);
  for (int row = 0; row < plan.num_tokens; ++row)
    std::copy_n(plan.decode_block_table.begin() + static_cast<size_t>(row) * plan.decode_max_pages,
                plan.decode_max_pages,
                padded.decode_block_table.begin() + static_cast<size_t>(row) * max_pages);
  for (int row = static_cast<int>(plan.logit_rows.size()); row < batch; ++row)
    padded.logit_rows.push_back(row < plan.num_tokens ? 0 : row);
  return padded;
}

}  // namespace mla::model
