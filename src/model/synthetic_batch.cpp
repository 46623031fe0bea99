// Synthetic batches; see synthetic_batch.h.
#include "model/synthetic_batch.h"

#include <algorithm>

#include "core/error.h"

namespace mla::model {

SyntheticBatch make_synthetic_batch(const SyntheticBatchShape& shape, int vocab_size, int page_size,
                                    uint64_t seed) {
  MLA_CHECK_GT(vocab_size, 0);
  MLA_CHECK_GT(page_size, 0);
  MLA_CHECK_GE(shape.decode_rows, 0);
  MLA_CHECK_GE(shape.decode_context, 0);
  MLA_CHECK_GE(shape.prefill_tokens, shape.prefill_sequences);
  MLA_CHECK_GE(shape.first_prefill_context, 0);
  if (shape.prefill_tokens > 0) MLA_CHECK_GT(shape.prefill_sequences, 0);
  SyntheticBatch out;
  ForwardBatch& batch = out.batch;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next_token = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab_size));
  };
  auto add_sequence = [&](int num_cached, int num_tokens) {
    SequenceSlice slice;
    slice.first_token = static_cast<int>(batch.token_ids.size());
    slice.num_tokens = num_tokens;
    slice.num_cached = num_cached;
    const int length = num_cached + num_tokens;
    const int pages = (length + page_size - 1) / page_size;
    for (int p = 0; p < pages; ++p) slice.block_table.push_back(out.num_pages + p);
    out.num_pages += pages;
    for (int j = 0; j < num_tokens; ++j) {
      const int position = num_cached + j;
      batch.token_ids.push_back(next_token());
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(int64_t(slice.block_table[position / page_size]) * page_size +
                                   position % page_size);
    }
    if (num_tokens == 1) out.decode_context_tokens += num_cached + 1;  // a decode row
    batch.sequences.push_back(std::move(slice));
  };
  for (int row = 0; row < shape.decode_rows; ++row) {
    add_sequence(shape.decode_context, 1);
    batch.logit_rows.push_back(row);
  }
  for (int s = 0; s < shape.prefill_sequences; ++s) {
    const int tokens = shape.prefill_tokens / shape.prefill_sequences +
                       (s < shape.prefill_tokens % shape.prefill_sequences ? 1 : 0);
    add_sequence(s == 0 ? shape.first_prefill_context : 0, tokens);
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
  }
  return out;
}

std::vector<SyntheticBatchShape> memory_profile_shapes(int max_num_batched_tokens, int max_num_seqs,
                                                       int max_model_len, int decode_context) {
  MLA_CHECK_GT(max_num_batched_tokens, 0);
  MLA_CHECK_GT(max_num_seqs, 0);
  MLA_CHECK_GT(max_model_len, 1);
  // Prefill tokens spread over `sequences` (each at most max_model_len), the first one given as
  // much context as max_model_len leaves it.
  auto prefill = [&](SyntheticBatchShape shape, int tokens, int max_sequences) {
    const int needed = (tokens + max_model_len - 1) / max_model_len;
    int sequences = std::max(std::min(4, tokens), needed);
    // At least two tokens each: a one-token sequence would be a decode row.
    sequences = std::min({sequences, std::max(max_sequences, 1), std::max(tokens / 2, 1)});
    tokens = static_cast<int>(std::min<int64_t>(tokens, int64_t(sequences) * max_model_len));
    shape.prefill_tokens = tokens;
    shape.prefill_sequences = sequences;
    const int first = tokens / sequences + (tokens % sequences > 0 ? 1 : 0);
    shape.first_prefill_context = std::max(0, max_model_len - first);
    return shape;
  };
  std::vector<SyntheticBatchShape> shapes;
  shapes.push_back(prefill({}, max_num_batched_tokens, max_num_seqs));
  const int context = std::min(decode_context, max_model_len - 1);
  if (max_num_seqs > 1 && max_num_batched_tokens > 1) {
    SyntheticBatchShape mixed;
    mixed.decode_rows = std::min(max_num_seqs - 1, max_num_batched_tokens / 2);
    mixed.decode_context = context;
    shapes.push_back(prefill(mixed, max_num_batched_tokens - mixed.decode_rows,
                             max_num_seqs - mixed.decode_rows));
  }
  SyntheticBatchShape decode;
  decode.decode_rows = std::min(max_num_seqs, max_num_batched_tokens);
  decode.decode_context = context;
  shapes.push_back(decode);
  return shapes;
}

}  // namespace mla::model
