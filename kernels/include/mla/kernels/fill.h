// Deterministic pseudo-random fills for tests and benchmarks (counter-based, so the host can
// compute exactly what the device wrote).
//
// value(seed, i) ≈ Normal(0, stddev) clipped to [-clip, clip]: an Irwin–Hall sum of four 16-bit
// hashes, scaled by one float multiply from an exact integer, so host and device agree bit for bit
// (no transcendental functions, nothing an FMA contraction could change).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtypes.h"
#include "mla/kernels/host_device.h"

namespace mla::kernels {

MLA_HOST_DEVICE uint32_t hash32(uint32_t x) {
  // A 32-bit integer finaliser (xorshift-multiply), good enough to decorrelate neighbours.
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

struct RandomFillSpec {
  uint64_t seed = 0;
  float stddev = 0.1f;
  float clip = 1.0f;
  // stddev · sqrt(3) / 65536: maps the centred Irwin–Hall integer to the value (computed once).
  float scale() const { return stddev * 1.7320508075688772f / 65536.f; }
};

MLA_HOST_DEVICE float random_fill_value(uint64_t seed, uint64_t index, float scale, float clip) {
  const uint32_t a = hash32(static_cast<uint32_t>(index) ^ hash32(static_cast<uint32_t>(seed)));
  const uint32_t b = hash32(static_cast<uint32_t>(index >> 32) + 0x9e3779b9u * (a | 1u) +
                            static_cast<uint32_t>(seed >> 32));
  const int sum = int(a & 0xffffu) + int(a >> 16) + int(b & 0xffffu) + int(b >> 16) - 2 * 65536;
  const float value = static_cast<float>(sum) * scale;
  return value > clip ? clip : value < -clip ? -clip : value;
}

// Fills `count` bf16 values on the device: element i = bf16(random_fill_value(seed, i, ...)).
void launch_fill_random_bf16(bf16* data, size_t count, const RandomFillSpec& spec,
                             cudaStream_t stream);

}  // namespace mla::kernels
