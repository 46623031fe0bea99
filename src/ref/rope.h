// Rotary position embedding as DeepSeek applies it: YaRN-scaled frequencies, interleaved pairs.
//
// The subtle part is the layout. DeepSeek's inference code rotates interleaved pairs
// (x[2i], x[2i+1]) by the angle position · inv_freq[i]. Hugging Face's DeepseekV3 first permutes
// the 64 values to [evens | odds] and rotates halves (rotate_half), and its DeepseekV2 multiplies
// the pairs as complex numbers; all three give the same pairs the same angles, so q_pe · k_pe is
// identical. We keep the interleaved layout in place (the cached k_pe is in it).
// YaRN (as in DeepSeek's and Hugging Face's code, fp32 frequencies): inv_freq[i] blends the
// interpolated 1/(factor·theta^(2i/d)) and the extrapolated 1/theta^(2i/d) with a linear ramp
// between the correction dims floor(low) and ceil(high) found from beta_fast and beta_slow over
// the original context; cos and sin are multiplied by cos_sin_scale (1.0 for released models).
#pragma once

#include <cstdint>
#include <vector>

namespace mla::ref {

struct RopeParams {
  int rotary_dim = 64;  // qk_rope_head_dim
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double cos_sin_scale = 1.0;
};

// inv_freq[i], i < rotary_dim / 2, rounded to fp32 as the reference implementations hold them.
std::vector<float> rope_inverse_frequencies(const RopeParams& params);

// Rotates, in place, the rotary_dim values at x + t · token_stride + h · head_stride for every
// token t < tokens and head h < heads, by the angle positions[t] · inv_freq[i] for pair i;
// inv_freq from rope_inverse_frequencies().
void apply_rope(float* x, int64_t tokens, int64_t token_stride, int64_t heads, int64_t head_stride,
                int rotary_dim, const int32_t* positions, const float* inv_freq,
                float cos_sin_scale);

}  // namespace mla::ref
