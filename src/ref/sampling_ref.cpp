// CPU twin of the GPU sampler; see sampling_ref.h. Compiled with -ffp-contract=off (src/CMakeLists)
// so that the float operations of sampling_math.h stay the separate roundings the kernel does.
#include "ref/sampling_ref.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"

namespace mla::ref {
namespace {

using namespace mla::kernels;

// The kept tokens' fixed-point weights (all zero but the chosen one for greedy), and the greedy
// token when there is no draw.
struct KeptWeights {
  std::vector<uint64_t> weight;  // [vocab]
  int32_t greedy = -1;           // >= 0: no draw, this token
};

KeptWeights kept_weights(std::span<const float> logits, const SamplingRowParams& p,
                         std::span<const int32_t> context, int64_t prompt_length) {
  const std::vector<float> work = penalise_logits(logits, p, context, prompt_length);
  const int64_t vocab = int64_t(work.size());
  const int id_bits = sampling_id_bits(vocab);
  std::vector<uint64_t> keys(vocab);
  for (int64_t i = 0; i < vocab; ++i) keys[i] = sampling_key(work[i], i, id_bits, vocab);
  const uint64_t best = *std::max_element(keys.begin(), keys.end());
  const int64_t best_id = sampling_key_id(best, id_bits, vocab);
  const float max_logit = work[best_id];
  KeptWeights kept;
  if (p.temperature == 0.0f || !std::isfinite(max_logit)) {
    kept.greedy = int32_t(best_id);
    return kept;
  }
  std::vector<float> probability(vocab);
  std::vector<uint64_t> weight(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    probability[i] = sampling_probability(work[i], max_logit, p.temperature);
    weight[i] = sampling_fixed_point(probability[i]);
  }
  std::vector<uint64_t> sorted;  // most likely first, when top-k or top-p needs the order
  if ((p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f) {
    sorted = keys;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
  }
  uint64_t cut = 0;
  if (p.top_k > 0 && p.top_k < vocab) cut = sorted[p.top_k - 1];
  if (p.top_p < 1.0f) {
    uint64_t total = 0;
    for (int64_t i = 0; i < vocab; ++i)
      if (keys[i] >= cut) total += weight[i];
    const uint64_t need = sampling_top_p_need(p.top_p, total);
    uint64_t mass = 0;
    for (uint64_t key : sorted) {
      MLA_CHECK_GE(key, cut);
      mass += weight[sampling_key_id(key, id_bits, vocab)];
      if (mass >= need) {
        cut = key;
        break;
      }
    }
  }
  kept.weight.assign(vocab, 0);
  for (int64_t i = 0; i < vocab; ++i) {
    if (keys[i] < cut) continue;
    if (p.min_p > 0.0f && !(probability[i] >= p.min_p)) continue;
    kept.weight[i] = weight[i];
  }
  return kept;
}

}  // namespace

std::vector<float> penalise_logits(std::span<const float> logits, const SamplingRowParams& p,
                                   std::span<const int32_t> context, int64_t prompt_length) {
  const int64_t vocab = int64_t(logits.size());
  std::vector<float> work(logits.begin(), logits.end());
  const int64_t length = int64_t(context.size());
  prompt_length = std::clamp<int64_t>(prompt_length, 0, length);
  std::vector<uint8_t> seen(vocab, 0);
  std::vector<uint32_t> generated(vocab, 0);
  for (int64_t j = 0; j < length; ++j) {
    const int32_t id = context[j];
    if (id < 0 || id >= vocab) continue;
    seen[id] = 1;
    if (j >= prompt_length) ++generated[id];
  }
  for (int64_t i = 0; i < vocab; ++i)
    if (seen[i]) work[i] = sampling_penalise(work[i], true, generated[i], p);
  return work;
}

int32_t sample_row(std::span<const float> logits, const SamplingRowParams& p,
                   std::span<const int32_t> context, int64_t prompt_length,
                   SampledLogprobs* logprobs) {
  const int64_t vocab = int64_t(logits.size());
  MLA_CHECK_GT(vocab, 0);
  const KeptWeights kept = kept_weights(logits, p, context, prompt_length);
  int32_t chosen = kept.greedy;
  if (chosen < 0) {
    uint64_t total = 0;
    for (uint64_t w : kept.weight) total += w;
    const uint64_t r = sampling_scale_random(sampling_uniform64(p.seed, p.step), total);
    uint64_t mass = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      mass += kept.weight[i];
      if (r < mass) {
        chosen = int32_t(i);
        break;
      }
    }
    MLA_CHECK_GE(chosen, 0);
  }
  if (logprobs != nullptr && p.num_logprobs >= 0) {
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float logit : logits) sum += std::exp(double(logit) - max_logit);
    const double log_total = max_logit + std::log(sum);
    logprobs->logprob = static_cast<float>(logits[chosen] - log_total);
    logprobs->top.clear();
    const int64_t top = std::min<int64_t>(std::min(p.num_logprobs, kSamplingMaxLogprobs), vocab);
    const int id_bits = sampling_id_bits(vocab);
    std::vector<uint64_t> keys(vocab);
    for (int64_t i = 0; i < vocab; ++i) keys[i] = sampling_key(logits[i], i, id_bits, vocab);
    std::partial_sort(keys.begin(), keys.begin() + top, keys.end(), std::greater<>());
    for (int64_t n = 0; n < top; ++n) {
      const int64_t id = sampling_key_id(keys[n], id_bits, vocab);
      logprobs->top.emplace_back(int32_t(id), static_cast<float>(logits[id] - log_total));
    }
  }
  return chosen;
}

std::vector<double> sample_row_distribution(std::span<const float> logits,
                                            const SamplingRowParams& p,
                                            std::span<const int32_t> context,
                                            int64_t prompt_length) {
  const KeptWeights kept = kept_weights(logits, p, context, prompt_length);
  std::vector<double> distribution(logits.size(), 0.0);
  if (kept.greedy >= 0) {
    distribution[kept.greedy] = 1.0;
    return distribution;
  }
  double total = 0.0;
  for (uint64_t w : kept.weight) total += double(w);
  for (size_t i = 0; i < logits.size(); ++i) distribution[i] = double(kept.weight[i]) / total;
  return distribution;
}

}  // namespace mla::ref
