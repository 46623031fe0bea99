// Running one sequence: a latent cache of its own with a simple page list, prompt prefill (whole,
// in chunks, or token by token through the absorbed decode path) and greedy or sampled generation.
//
// This is the single-sequence driver for `mla generate` and the tests; the engine issue brings the
// shared page allocator and continuous batching over the same Model::forward. Pages are handed
// out in `page_order` (default 0, 1, 2, ...), so tests can scatter a sequence over the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"

namespace mla::model {

class SequenceRunner {
 public:
  // Room for `capacity_tokens` tokens in ceil(capacity / 64) pages.
  SequenceRunner(Model& model, int capacity_tokens, std::vector<int32_t> page_order = {});

  // Feeds `tokens` as one step: one token takes the absorbed decode path, more the prefill path
  // (attending to what is cached). Returns the logits of the last token ([vocab]) or, with
  // all_logits, of every token ([tokens, vocab]).
  std::vector<float> feed(std::span<const int32_t> tokens, bool all_logits = false);

  int length() const { return length_; }
  LatentCache& cache() { return cache_; }

 private:
  Model& model_;
  LatentCache cache_;
  std::vector<int32_t> pages_;
  int capacity_ = 0;
  int length_ = 0;
};

struct GenerateOptions {
  int max_tokens = 16;
  SamplingParams sampling;
  int prefill_chunk = 0;        // prompt tokens per step; 0: the whole prompt in one step
  bool token_by_token = false;  // feed the prompt one token per step (absorbed decode path)
  bool ignore_eos = false;      // keep going past eos_token_id
  bool keep_logits = false;     // return the logits behind every generated token
};

struct GenerateResult {
  std::vector<int32_t> ids;                // generated tokens (prompt excluded)
  std::vector<std::vector<float>> logits;  // with keep_logits: the logits each id was picked from
  std::string stop_reason;                 // "length" or "eos"
};

GenerateResult generate(Model& model, std::span<const int32_t> prompt,
                        const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace mla::model
