// CPU twin of the GPU sampler (kernels/sampling): the same algorithm in plain loops, so that for
// the same (logits, parameters, seed, step) both pick the same token and the same top-n.
//
// The subtle thing: it shares every deciding operation with the kernel through
// mla/kernels/sampling_math.h (probabilities from sampling_exp, fixed-point sums, the
// counter-based draw), so agreement is exact, not statistical; only the log-probabilities (a
// double log-softmax here, fp32 on the GPU) differ by rounding. Its draw order (kept tokens in id
// order) differs from model::draw_token's, its distribution does not.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "mla/kernels/sampling_math.h"

namespace mla::ref {

struct SampledLogprobs {
  float logprob = 0.0f;                        // of the chosen token
  std::vector<std::pair<int32_t, float>> top;  // min(n, vocab) (id, logprob), most likely first
};

// `context` holds the row's prompt then its generated tokens; the first `prompt_length` are prompt.
// Penalties as engine::TokenSampler: returns the penalised logits.
std::vector<float> penalise_logits(std::span<const float> logits,
                                   const kernels::SamplingRowParams& params,
                                   std::span<const int32_t> context, int64_t prompt_length);

// The token the GPU sampler picks for this row; fills `logprobs` when params.num_logprobs >= 0
// and it is given.
int32_t sample_row(std::span<const float> logits, const kernels::SamplingRowParams& params,
                   std::span<const int32_t> context, int64_t prompt_length,
                   SampledLogprobs* logprobs);

// The probabilities sample_row draws from (0 for tokens it never picks), normalised; for tests
// of the distribution.
std::vector<double> sample_row_distribution(std::span<const float> logits,
                                            const kernels::SamplingRowParams& params,
                                            std::span<const int32_t> context,
                                            int64_t prompt_length);

}  // namespace mla::ref
