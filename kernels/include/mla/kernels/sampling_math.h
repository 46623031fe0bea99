// The arithmetic that the GPU sampler (kernels/sampling) and its CPU twin (src/ref/sampling_ref)
// share bit for bit: per-row parameters, penalties, the sort key, probabilities, the draw.
//
// The one subtle thing: every step that decides a token is exact or is the same IEEE operation on
// both sides, so the kernel and the twin pick the same token for the same inputs, independent of
// summation order. Probabilities come from sampling_exp (basic operations with round-to-nearest
// intrinsics on the device, -ffp-contract=off C++ on the host: no FMA contraction can differ), are
// turned into 2^-40 fixed point, and every sum (top-p mass, the draw's CDF) is an exact uint64.
// The draw is counter-based: uniform64(seed, step) (splitmix64), scaled to [0, total) by a 64×64
// high product, so a row's token depends on (logits, parameters, seed, step) only.
#pragma once

#include <cstdint>

#include "mla/kernels/host_device.h"

#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cmath>
#endif

namespace mla::kernels {

constexpr int kSamplingMaxLogprobs = 20;  // out_top_ids / out_top_logprobs have this many columns

// One row's sampling parameters, as engine::SamplingOptions (ranges checked there already).
struct SamplingRowParams {
  float temperature = 1.0f;         // 0: greedy (first maximum of the penalised logits)
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; prompt and generated tokens
  float presence_penalty = 0.0f;    // generated tokens
  float frequency_penalty = 0.0f;   // generated tokens, times their count
  int32_t top_k = 0;                // 0: no limit
  int32_t num_logprobs = -1;        // -1: none; 0: the chosen token's; n (<= 20): and the top n
  uint64_t seed = 0;
  uint64_t step = 0;  // e.g. tokens generated so far: a new draw for every (seed, step)
};

// Probabilities in fixed point: q = floor(p · 2^40), p <= 1, so a row's sum stays below 2^63 for
// any vocab below 2^23 (launch_sampling checks it): uint64 sums never overflow.
constexpr double kSamplingFixedPointScale = 1099511627776.0;  // 2^40

// Round-to-nearest float operations that no compiler may fuse (nvcc contracts a*b+c across
// statements unless told; the host code is compiled with -ffp-contract=off and ISO C++).
MLA_HOST_DEVICE float sampling_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MLA_HOST_DEVICE float sampling_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MLA_HOST_DEVICE float sampling_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
MLA_HOST_DEVICE float sampling_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
MLA_HOST_DEVICE float sampling_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MLA_HOST_DEVICE uint32_t sampling_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
MLA_HOST_DEVICE float sampling_bits_float(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  return std::bit_cast<float>(x);
#endif
}

// The penalties of engine::TokenSampler on one token: `seen` (in prompt or generated) and its
// count among the generated tokens. Repetition first (a positive logit divided, a negative one
// multiplied), then logit -= count · frequency + presence.
MLA_HOST_DEVICE float sampling_penalise(float logit, bool seen, uint32_t generated_count,
                                        const SamplingRowParams& p) {
  if (seen && p.repetition_penalty != 1.0f)
    logit = logit > 0.0f ? sampling_div(logit, p.repetition_penalty)
                         : sampling_mul(logit, p.repetition_penalty);
  if (generated_count > 0 && (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f))
    logit =
        sampling_sub(logit, sampling_add(sampling_mul(float(generated_count), p.frequency_penalty),
                                         p.presence_penalty));
  return logit;
}

// Bits needed for ids 0..vocab-1 (0 for vocab 1).
MLA_HOST_DEVICE int sampling_id_bits(int64_t vocab) {
  int bits = 0;
  while ((int64_t(1) << bits) < vocab) ++bits;
  return bits;
}

// A total order over (value descending, id ascending) as one unsigned key, larger first: the
// float's order-preserving bits (with -0 made +0, which compares equal to it) in the high 32 bits,
// vocab-1-id left-aligned in the low 32. Keys are unique, so "the k largest keys" is the stable
// sort's top k and the maximum key is the first maximum.
MLA_HOST_DEVICE uint64_t sampling_key(float value, int64_t id, int id_bits, int64_t vocab) {
  const uint32_t bits = sampling_float_bits(sampling_add(value, 0.0f));  // -0 + 0 = +0
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (uint64_t(ordered) << 32) | (uint64_t(vocab - 1 - id) << (32 - id_bits));
}
// The (canonical) value a key was made from.
MLA_HOST_DEVICE float sampling_key_value(uint64_t key) {
  const uint32_t ordered = uint32_t(key >> 32);
  return sampling_bits_float((ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered);
}
MLA_HOST_DEVICE int64_t sampling_key_id(uint64_t key, int id_bits, int64_t vocab) {
  return vocab - 1 - int64_t((key & 0xffffffffull) >> (32 - id_bits));
}
// Radix passes of 8 bits that cover a key's meaningful bits.
MLA_HOST_DEVICE int sampling_key_digits(int id_bits) {
  return (32 + id_bits + 7) / 8;
}

// e^x for x <= 0 (0 below -87, and for -inf and NaN) with a relative error of a few 1e-7:
// Cody-Waite range reduction x = n·ln2 + r (ln2 in two parts, fused, so r is nearly exact), |r| <=
// ln2/2, then the degree-7 Taylor polynomial of e^r (truncation error < 6e-9) times 2^n. Exactly 1
// at 0.
MLA_HOST_DEVICE float sampling_exp(float x) {
  if (!(x > -87.0f)) return 0.0f;
#if defined(__CUDA_ARCH__)
  const float n = floorf(sampling_fma(x, 1.44269504f, 0.5f));  // round(x / ln2)
#else
  const float n = std::floor(sampling_fma(x, 1.44269504f, 0.5f));
#endif
  float r = sampling_fma(-n, 0.693145752f, x);  // ln2's leading bits: n·hi is exact
  r = sampling_fma(-n, 1.42860677e-06f, r);     // ln2 - hi
  float poly = 1.0f / 5040.0f;
  poly = sampling_fma(poly, r, 1.0f / 720.0f);
  poly = sampling_fma(poly, r, 1.0f / 120.0f);
  poly = sampling_fma(poly, r, 1.0f / 24.0f);
  poly = sampling_fma(poly, r, 1.0f / 6.0f);
  poly = sampling_fma(poly, r, 0.5f);
  poly = sampling_fma(poly, r, 1.0f);
  poly = sampling_fma(poly, r, 1.0f);
  const uint32_t exponent = uint32_t(int(n) + 127) << 23;  // n in [-126, 0]: a normal 2^n
  return sampling_mul(poly, sampling_bits_float(exponent));
}

// The unnormalised probability of a penalised logit: e^((logit - max) / temperature), 1 at max.
MLA_HOST_DEVICE float sampling_probability(float logit, float max_logit, float temperature) {
  return sampling_exp(sampling_div(sampling_sub(logit, max_logit), temperature));
}
MLA_HOST_DEVICE uint64_t sampling_fixed_point(float probability) {
  return uint64_t(double(probability) * kSamplingFixedPointScale);
}

// Top-p keeps the shortest prefix (most likely first) whose fixed-point mass reaches this.
MLA_HOST_DEVICE uint64_t sampling_top_p_need(float top_p, uint64_t total) {
#if defined(__CUDA_ARCH__)
  const double need = ceil(double(top_p) * double(total));
#else
  const double need = std::ceil(double(top_p) * double(total));
#endif
  if (!(need >= 1.0)) return 1;
  if (need >= double(total)) return total;
  return uint64_t(need);
}

MLA_HOST_DEVICE uint64_t sampling_splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
MLA_HOST_DEVICE uint64_t sampling_uniform64(uint64_t seed, uint64_t step) {
  return sampling_splitmix64(sampling_splitmix64(seed) ^ step);
}
// floor(random · total / 2^64): uniform in [0, total) up to 2^-64 bias.
MLA_HOST_DEVICE uint64_t sampling_scale_random(uint64_t random, uint64_t total) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(random, total);
#else
  const uint64_t a_lo = random & 0xffffffffull, a_hi = random >> 32;
  const uint64_t b_lo = total & 0xffffffffull, b_hi = total >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi;
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffull) + (lo_hi & 0xffffffffull);
  return a_hi * b_hi + (hi_lo >> 32) + (lo_hi >> 32) + (cross >> 32);
#endif
}

}  // namespace mla::kernels
