// Per-request sampling: penalties, greedy or temperature sampling with top-k, top-p and min-p,
// a per-request seed, and log-probabilities of the chosen token and the top alternatives.
//
// Order of work on one row of logits: repetition penalty (prompt and generated tokens: a positive
// logit is divided by it, a negative one multiplied, as Hugging Face and vLLM do), then frequency
// and presence penalties (generated tokens only: logit -= count · frequency + presence, as the
// OpenAI API defines them); temperature 0 then takes the first maximum. Otherwise: the top_k
// largest (stable order, ties to the lower id) → the smallest prefix whose probability reaches
// top_p → drop tokens below min_p × the most likely one → draw from what is left with a
// mt19937_64 seeded per sequence. That draw is model::draw_token, the one model::Sampler makes,
// so without min_p and penalties the same seed gives the same tokens as `mla generate`.
// Log-probabilities are those of the model (log-softmax of the raw logits, before penalties and
// temperature), as vLLM reports.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace mla::engine {

struct SamplingOptions {
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // 0: no limit
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1: none
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  std::optional<uint64_t> seed;     // none: a random seed per sequence
  int logprobs = -1;                // -1: none; 0: the chosen token's; n: and the top n
};

constexpr int kMaxLogprobs = 20;

// Throws mla::Error naming the field for a value out of range.
void check_sampling_options(const SamplingOptions& options);

struct TokenLogprobs {
  float logprob = 0.0f;                        // of the chosen token
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

class TokenSampler {
 public:
  TokenSampler(const SamplingOptions& options, uint64_t seed);

  const SamplingOptions& options() const { return options_; }
  uint64_t seed() const { return seed_; }  // also the device sampler's seed for this sequence

  // The next token after `prompt` + `generated` from `logits` [vocab]; fills `logprobs` when
  // options.logprobs >= 0 and it is given.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> generated, TokenLogprobs* logprobs);

 private:
  SamplingOptions options_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> work_;  // penalised logits
};

}  // namespace mla::engine
