// Host-side numeric types: bf16 storage with round-to-nearest-even conversion, and the decoders of
// the other checkpoint formats (IEEE half, FP8 E4M3).
//
// mla::bf16 is a plain 2-byte struct with the same bit layout as CUDA's __nv_bfloat16, so device
// buffers of either can be viewed as the other. Conversion rounds to nearest even, as the GPU's
// __float2bfloat16 does; NaN stays NaN (quiet), infinities stay infinities. FP8 E4M3 is the "fn"
// variant DeepSeek-V3 checkpoints use (torch.float8_e4m3fn): no infinities, S.1111.111 is NaN,
// largest finite value 448.
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

// IEEE 754 binary16 (safetensors F16) to float; exact.
inline float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero and subnormals
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  uint32_t word;
  std::memcpy(&word, &magnitude, sizeof(word));
  word |= sign;
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

// FP8 E4M3 "fn" (safetensors F8_E4M3, exponent bias 7) to float; exact.
inline float fp8_e4m3_to_float(uint8_t bits) {
  const bool negative = (bits & 0x80u) != 0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 · 2^-6
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1 + m/8) · 2^(e-7)
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace mla
