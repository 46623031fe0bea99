// Greedy and temperature/top-k/top-p sampling; see sampler.h.
#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace mla::model {

void check_sampling_params(const SamplingParams& params) {
  if (!(params.temperature >= 0.0f))
    throw_error("sampling: temperature must be >= 0, got {}", params.temperature);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    throw_error("sampling: top_p must be in (0, 1], got {}", params.top_p);
  if (params.top_k < 0) throw_error("sampling: top_k must be >= 0, got {}", params.top_k);
}

int32_t argmax(const float* logits, int vocab_size) {
  return static_cast<int32_t>(std::max_element(logits, logits + vocab_size) - logits);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  check_sampling_params(params);
}

int32_t Sampler::sample(const float* logits, int vocab_size) {
  return draw_token(logits, vocab_size, params_.temperature, params_.top_k, params_.top_p, 0.0f,
                    rng_);
}

int32_t draw_token(const float* logits, int vocab_size, float temperature, int top_k, float top_p,
                   float min_p, std::mt19937_64& rng) {
  if (temperature == 0.0f) return argmax(logits, vocab_size);
  std::vector<int32_t> order(vocab_size);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int keep = top_k > 0 ? std::min(top_k, vocab_size) : vocab_size;
  std::vector<double> probabilities(keep);
  const double max_scaled = logits[order[0]] / double(temperature);
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    probabilities[i] = std::exp(logits[order[i]] / double(temperature) - max_scaled);
    total += probabilities[i];
  }
  double mass = 0.0;
  for (int i = 0; i < keep; ++i) {
    mass += probabilities[i] / total;
    if (mass >= top_p) {
      keep = i + 1;
      break;
    }
  }
  if (min_p > 0.0f)  // probabilities[0] is the largest, exp(0) = 1
    while (keep > 1 && probabilities[keep - 1] < min_p * probabilities[0]) --keep;
  std::discrete_distribution<int> pick(probabilities.begin(), probabilities.begin() + keep);
  return order[pick(rng)];
}

}  // namespace mla::model
