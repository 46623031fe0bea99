// The 64-row split-KV bodies' score masking (the lockstep body, splitkv_wgmma.cuh, and the seesaw,
// splitkv_seesaw.cuh): one row of an m64nN fp32 accumulator of S = Q·Kᵀ as a quad of threads holds
// it, scaled to base 2 and masked past the row's last visible key (the lockstep body), or masked
// only and left unscaled, its maximum scaled (the seesaw: P = 2^(x · scale − m) is then one FFMA).
#pragma once

#include <cmath>

namespace mla::kernels::decode {

// The maximum of a row's partial maxima over the quad of threads that holds the row.
__device__ __forceinline__ float quad_row_max(float row_max) {
  row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
  return fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
}

// Row h (0 or 1) of this thread's accumulator fragment of kSteps n8 tiles: element (k, e) of the
// row, s_acc[4k + 2h + e], holds key key0 + 8k + e (key0 already has the thread's 2 · (lane mod
// 4)). Scales each score to base 2 (· scale_log2), sets keys past `last_key` to −∞, and returns the
// row's maximum over the quad.
template <int kSteps>
__device__ __forceinline__ float scale_mask_row_max(float (&s_acc)[4 * kSteps], int h, int key0,
                                                    int last_key, float scale_log2) {
  float row_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float& x = s_acc[4 * k + 2 * h + e];
      x = key0 + 8 * k + e <= last_key ? x * scale_log2 : -INFINITY;
      row_max = fmaxf(row_max, x);
    }
  }
  return quad_row_max(row_max);
}

// The same row left unscaled: keys past `last_key` set to −∞ when `mask` (false for a page that
// every row of the tile sees whole: a uniform branch), and the row's maximum over the quad returned
// scaled to base 2 (scaling commutes with the maximum: scale_log2 > 0, and rounding is monotonic).
template <int kSteps>
__device__ __forceinline__ float mask_row_max_scaled(float (&s_acc)[4 * kSteps], int h, int key0,
                                                     int last_key, bool mask, float scale_log2) {
  if (mask) {
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s_acc[4 * k + 2 * h + e];
        if (key0 + 8 * k + e > last_key) x = -INFINITY;
      }
    }
  }
  // Two chains of half the depth (one per element of each n8 tile).
  float row_max[2] = {s_acc[2 * h], s_acc[2 * h + 1]};
#pragma unroll
  for (int k = 1; k < kSteps; ++k) {
#pragma unroll
    for (int e = 0; e < 2; ++e) row_max[e] = fmaxf(row_max[e], s_acc[4 * k + 2 * h + e]);
  }
  return quad_row_max(fmaxf(row_max[0], row_max[1])) * scale_log2;
}

}  // namespace mla::kernels::decode
