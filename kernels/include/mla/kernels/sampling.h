// Sampling on the GPU: penalties, greedy, temperature, top-k, top-p, min-p, a counter-based
// per-row draw, and log-probabilities; the host API (plain C++). CPU twin: ref::sample_row.
//
// Per row, in engine::TokenSampler's order: repetition penalty (prompt and generated tokens, once
// per distinct token), then frequency · count + presence (generated tokens); temperature 0 takes
// the first maximum. Otherwise probabilities e^((logit - max) / T) in 2^-40 fixed point (see
// sampling_math.h), keep the top_k largest (ties to the lower id), then the shortest
// most-likely-first prefix whose mass reaches top_p, then drop tokens below min_p × the most likely
// (whose probability is 1), and draw one token with the uniform of (seed, step) over the kept
// tokens' cumulative mass taken in id order. That order differs from model::draw_token's (most
// likely first) but the distribution is the same; the mt19937_64 stream is not reproduced.
// Log-probabilities are those of the raw logits (log-softmax before penalties and temperature).
//
// The subtle thing: the kernel keeps its state in the caller's workspace (a penalised copy of each
// row and per-token context counts, which it clears itself), so a launch never allocates, needs
// no zeroed memory and can be captured in a CUDA graph; rows may exceed 256 (one CTA per row).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mla/kernels/sampling_math.h"

namespace mla::kernels {

struct SamplingParams {
  int64_t rows = 0;               // >= 0
  int64_t vocab = 0;              // in [1, 2^23)
  const float* logits = nullptr;  // [rows, vocab] fp32, row stride below (not modified)
  int64_t logits_row_stride = 0;  // >= vocab
  const SamplingRowParams* row_params = nullptr;  // [rows], device
  // Penalty context per row, as one CSR list: the token ids a row has seen, prompt then generated.
  // Ids outside [0, vocab) are ignored. May be null when every row has no penalty.
  const int32_t* context_tokens = nullptr;   // [context_offsets[rows]] int32, device
  const int64_t* context_offsets = nullptr;  // [rows + 1] int64, device: row r owns
                                             // [offsets[r], offsets[r + 1])
  const int32_t* prompt_lengths = nullptr;   // [rows] int32, device: the first n of a row's
                                             // context are its prompt (clamped to the length)
  int32_t* out_tokens = nullptr;             // [rows] int32, device
  // Written for rows with num_logprobs >= 0 (may be null when no row asks): the chosen token's
  // log-probability, and the top min(n, vocab) (id, logprob), most likely first, ties to the lower
  // id; the remaining of the 20 columns get id -1 and -inf.
  float* out_logprob = nullptr;       // [rows] fp32, device
  int32_t* out_top_ids = nullptr;     // [rows, 20] int32, device
  float* out_top_logprobs = nullptr;  // [rows, 20] fp32, device
  void* workspace = nullptr;          // sampling_workspace_size(>= rows, vocab) bytes, 256-aligned
  size_t workspace_bytes = 0;
};

// Bytes of workspace for up to `max_rows` rows of `vocab` logits (8 bytes per logit).
size_t sampling_workspace_size(int64_t max_rows, int64_t vocab);

// Throws mla::Error naming the argument when `params` is unusable (checks only the host-visible
// shape and pointers: per-row values were checked by engine::check_sampling_options; a row's
// num_logprobs above 20 is treated as 20).
void check_sampling_params(const SamplingParams& params);

// One CTA per row; asynchronous on `stream`, no allocation, no host synchronisation.
void launch_sampling(const SamplingParams& params, cudaStream_t stream);

}  // namespace mla::kernels
