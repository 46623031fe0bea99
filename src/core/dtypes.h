// Host-side numeric types: bf16 storage with round-to-nearest-even conversion.
//
// mla::bf16 is a plain 2-byte struct with the same bit layout as CUDA's __nv_bfloat16, so device
// buffers of either can be viewed as the other. Conversion rounds to nearest even, as the GPU's
// __float2bfloat16 does; NaN stays NaN (quiet), infinities stay infinities.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mla {

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline float bf16_to_float(bf16 value) {
  uint32_t word = static_cast<uint32_t>(value.bits) << 16;
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

inline bf16 float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if (std::isnan(value)) return bf16{static_cast<uint16_t>((word >> 16) | 0x0040u)};
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit.
  const uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return bf16{static_cast<uint16_t>((word + rounding) >> 16)};
}

// Rounds a float through bf16 and back: what storing it in a bf16 tensor does to it.
inline float round_to_bf16(float value) {
  return bf16_to_float(float_to_bf16(value));
}

}  // namespace mla
