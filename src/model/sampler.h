// Picking the next token from logits: greedy (temperature 0, the default) or sampling with
// temperature, top-k and top-p, reproducible from a seed.
//
// Greedy takes the first index of the maximum (ties go to the lower id). Sampling: logits /
// temperature → keep the top_k largest (0: all) → keep the smallest prefix, by probability, whose
// mass reaches top_p → draw from the renormalised rest with a mt19937_64 seeded by `seed`.
#pragma once

#include <cstdint>
#include <random>

namespace mla::model {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0: no limit
  uint64_t seed = 0;
};

// Throws mla::Error on a value out of range (temperature < 0, top_p outside (0, 1], top_k < 0).
void check_sampling_params(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t sample(const float* logits, int vocab_size);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

int32_t argmax(const float* logits, int vocab_size);

// The draw shared by Sampler and the engine's TokenSampler (so both give the same tokens for the
// same seed): temperature 0 takes argmax; otherwise logits / temperature → the top_k largest
// (stable, ties to the lower id; 0: all) → the smallest prefix whose probability reaches top_p →
// without the tokens below min_p × the most likely one → one draw from `rng`.
int32_t draw_token(const float* logits, int vocab_size, float temperature, int top_k, float top_p,
                   float min_p, std::mt19937_64& rng);

}  // namespace mla::model
