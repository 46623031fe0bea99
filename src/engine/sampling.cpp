// Penalties, the draw and log-probabilities; see sampling.h.
#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "model/sampler.h"

namespace mla::engine {

void check_sampling_options(const SamplingOptions& options) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    throw_error("temperature must be >= 0, got {}", options.temperature);
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f))
    throw_error("top_p must be in (0, 1], got {}", options.top_p);
  if (options.top_k < 0) throw_error("top_k must be >= 0 (0: no limit), got {}", options.top_k);
  if (!(options.min_p >= 0.0f && options.min_p <= 1.0f))
    throw_error("min_p must be in [0, 1], got {}", options.min_p);
  if (!(options.repetition_penalty > 0.0f) || !std::isfinite(options.repetition_penalty))
    throw_error("repetition_penalty must be > 0, got {}", options.repetition_penalty);
  if (!(options.presence_penalty >= -2.0f && options.presence_penalty <= 2.0f))
    throw_error("presence_penalty must be in [-2, 2], got {}", options.presence_penalty);
  if (!(options.frequency_penalty >= -2.0f && options.frequency_penalty <= 2.0f))
    throw_error("frequency_penalty must be in [-2, 2], got {}", options.frequency_penalty);
  if (options.logprobs < -1 || options.logprobs > kMaxLogprobs)
    throw_error("logprobs must be in [0, {}], got {}", kMaxLogprobs, options.logprobs);
}

TokenSampler::TokenSampler(const SamplingOptions& options, uint64_t seed)
    : options_(options), seed_(seed), rng_(seed) {
  check_sampling_options(options);
}

int32_t TokenSampler::sample(std::span<const float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> generated, TokenLogprobs* logprobs) {
  const int vocab = static_cast<int>(logits.size());
  MLA_CHECK_GT(vocab, 0);
  work_.assign(logits.begin(), logits.end());
  if (options_.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(vocab, 0);
    for (int32_t id : prompt) seen[id] = 1;
    for (int32_t id : generated) seen[id] = 1;
    for (int id = 0; id < vocab; ++id)
      if (seen[id])
        work_[id] = work_[id] > 0 ? work_[id] / options_.repetition_penalty
                                  : work_[id] * options_.repetition_penalty;
  }
  if (options_.frequency_penalty != 0.0f || options_.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : generated) ++counts[id];
    for (const auto& [id, count] : counts)
      work_[id] -= count * options_.frequency_penalty + options_.presence_penalty;
  }

  const int32_t chosen = model::draw_token(work_.data(), vocab, options_.temperature,
                                           options_.top_k, options_.top_p, options_.min_p, rng_);

  if (logprobs && options_.logprobs >= 0) {
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float logit : logits) sum += std::exp(double(logit) - max_logit);
    const double log_total = max_logit + std::log(sum);
    logprobs->logprob = static_cast<float>(logits[chosen] - log_total);
    logprobs->top.clear();
    const int top = std::min(options_.logprobs, vocab);
    if (top > 0) {
      std::vector<int32_t> ids(vocab);
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (int i = 0; i < top; ++i)
        logprobs->top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - log_total));
    }
  }
  return chosen;
}

}  // namespace mla::engine
