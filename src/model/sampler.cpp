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
  if (params_.temperature == 0.0f) return argmax(logits, vocab_size);
  std::vector<int32_t> order(vocab_size);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int keep = params_.top_k > 0 ? std::min(params_.top_k, vocab_size) : vocab_size;
  std::vector<double> probabilities(keep);
  const double max_scaled = logits[order[0]] / double(params_.temperature);
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    probabilities[i] = std::exp(logits[order[i]] / double(params_.temperature) - max_scaled);
    total += probabilities[i];
  }
  double mass = 0.0;
  for (int i = 0; i < keep; ++i) {
    mass += probabilities[i] / total;
    if (mass >= params_.top_p) {
      keep = i + 1;
      break;
    }
  }
  std::discrete_distribution<int> pick(probabilities.begin(), probabilities.begin() + keep);
  return order[pick(rng_)];
}

}  // namespace mla::model
