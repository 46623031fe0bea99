// YaRN RoPE on interleaved pairs; see rope.h.
#include "ref/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"

namespace mla::ref {
namespace {

// The dimension at which a frequency completes `rotations` turns over the original context.
double correction_dim(double rotations, int dim, double theta, int original_max_positions) {
  return dim * std::log(original_max_positions / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(theta));
}

}  // namespace

std::vector<float> rope_inverse_frequencies(const RopeParams& params) {
  MLA_CHECK(params.rotary_dim > 0 && params.rotary_dim % 2 == 0);
  const int half = params.rotary_dim / 2;
  std::vector<float> inv_freq(half);
  double low = 0.0, high = 0.0;
  if (params.yarn) {
    low = std::max(std::floor(correction_dim(params.beta_fast, params.rotary_dim, params.theta,
                                             params.original_max_position_embeddings)),
                   0.0);
    high = std::min(std::ceil(correction_dim(params.beta_slow, params.rotary_dim, params.theta,
                                             params.original_max_position_embeddings)),
                    double(params.rotary_dim - 1));
    if (low == high) high += 0.001;  // as the references do: no division by zero
  }
  for (int i = 0; i < half; ++i) {
    // fp32 throughout, as torch computes theta ** (arange(0, d, 2) / d) in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.rotary_dim);
    const float base_power = std::pow(static_cast<float>(params.theta), exponent);
    const float extrapolated = 1.0f / base_power;
    if (!params.yarn) {
      inv_freq[i] = extrapolated;
      continue;
    }
    const float interpolated = 1.0f / (static_cast<float>(params.factor) * base_power);
    const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    // extrapolation weight = 1 - ramp: low dims (fast rotations) keep their frequency.
    inv_freq[i] = interpolated * ramp + extrapolated * (1.0f - ramp);
  }
  return inv_freq;
}

void apply_rope(float* x, int64_t tokens, int64_t token_stride, int64_t heads, int64_t head_stride,
                int rotary_dim, const int32_t* positions, const float* inv_freq,
                float cos_sin_scale) {
  std::vector<float> cos_values(rotary_dim / 2), sin_values(rotary_dim / 2);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < rotary_dim / 2; ++i) {
      // The angle is an fp32 product, as in the references (position_ids.float() * inv_freq).
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_values[i] = static_cast<float>(std::cos(double(angle))) * cos_sin_scale;
      sin_values[i] = static_cast<float>(std::sin(double(angle))) * cos_sin_scale;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* row = x + t * token_stride + h * head_stride;
      for (int i = 0; i < rotary_dim / 2; ++i) {
        const float even = row[2 * i];
        const float odd = row[2 * i + 1];
        row[2 * i] = even * cos_values[i] - odd * sin_values[i];
        row[2 * i + 1] = odd * cos_values[i] + even * sin_values[i];
      }
    }
  }
}

}  // namespace mla::ref
