// The single-sequence runner and the generation loop; see generate.h.
#include "model/generate.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace mla::model {

SequenceRunner::SequenceRunner(Model& model, int capacity_tokens, std::vector<int32_t> page_order)
    : model_(model), capacity_(capacity_tokens) {
  if (capacity_tokens <= 0)
    throw_error("sequence: capacity must be positive, got {}", capacity_tokens);
  constexpr int kPageSize = 64;
  const int pages = (capacity_tokens + kPageSize - 1) / kPageSize;
  if (page_order.empty()) {
    page_order.resize(pages);
    std::iota(page_order.begin(), page_order.end(), 0);
  }
  if (static_cast<int>(page_order.size()) < pages)
    throw_error("sequence: {} pages given for {} tokens (needs {})", page_order.size(),
                capacity_tokens, pages);
  std::vector<int32_t> sorted(page_order.begin(), page_order.begin() + pages);
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw_error("sequence: the page order must list distinct, non-negative pages");
  pages_ = std::move(page_order);
  const int num_pages = *std::max_element(pages_.begin(), pages_.end()) + 1;
  cache_ = model_.allocate_cache(num_pages, kPageSize);
}

std::vector<float> SequenceRunner::feed(std::span<const int32_t> tokens, bool all_logits) {
  const int count = static_cast<int>(tokens.size());
  if (count == 0) throw_error("sequence: nothing to feed");
  if (length_ + count > capacity_)
    throw_error("sequence: {} + {} tokens exceed the capacity of {}", length_, count, capacity_);
  ForwardBatch batch;
  SequenceSlice slice;
  slice.first_token = 0;
  slice.num_tokens = count;
  slice.num_cached = length_;
  slice.block_table = pages_;
  for (int j = 0; j < count; ++j) {
    const int position = length_ + j;
    batch.token_ids.push_back(tokens[j]);
    batch.positions.push_back(position);
    batch.slot_mapping.push_back(int64_t(pages_[position / cache_.page_size]) * cache_.page_size +
                                 position % cache_.page_size);
    if (all_logits || j == count - 1) batch.logit_rows.push_back(j);
  }
  batch.sequences.push_back(std::move(slice));
  const Tensor logits = model_.forward(batch, cache_);
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  model_.backend().copy_to_host(logits, host.data());
  length_ += count;
  return host;
}

GenerateResult generate(Model& model, std::span<const int32_t> prompt,
                        const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw_error("generate: the prompt is empty (give at least one token id)");
  if (options.max_tokens < 0) throw_error("generate: max_tokens must be >= 0");
  if (options.prefill_chunk < 0) throw_error("generate: prefill_chunk must be >= 0");
  const int vocab = model.config().vocab_size;
  for (int32_t id : prompt)
    if (id < 0 || id >= vocab)
      throw_error("generate: prompt token id {} is outside the vocabulary (0..{})", id, vocab - 1);
  Sampler sampler(options.sampling);
  GenerateResult result;
  result.stop_reason = "length";
  if (options.max_tokens == 0) return result;

  SequenceRunner sequence(model, static_cast<int>(prompt.size()) + options.max_tokens);
  const int chunk = options.token_by_token      ? 1
                    : options.prefill_chunk > 0 ? options.prefill_chunk
                                                : static_cast<int>(prompt.size());
  std::vector<float> logits;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t count = std::min(prompt.size() - begin, size_t(chunk));
    logits = sequence.feed(prompt.subspan(begin, count));
  }
  const auto& eos = model.config().eos_token_ids;
  for (int i = 0; i < options.max_tokens; ++i) {
    const int32_t next = sampler.sample(logits.data(), vocab);
    result.ids.push_back(next);
    if (options.keep_logits) result.logits.push_back(logits);
    if (on_token) on_token(next);
    if (!options.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      result.stop_reason = "eos";
      break;
    }
    if (i + 1 < options.max_tokens) logits = sequence.feed(std::span<const int32_t>(&next, 1));
  }
  return result;
}

}  // namespace mla::model
