// Device helpers shared by the dense ops (kernels/ops/*.cu): fp32 <-> element conversion, 8-wide
// vector loads and stores, the runtime type dispatch, and the fp32 row reduction.
//
// The one thing to know: a vector access moves 8 elements (16 bytes of bf16, two 16-byte halves
// of fp32); the host (ops_host.h) picks the vector path only when every pointer and row stride
// keeps those accesses 16-byte aligned, so the kernels never check alignment themselves.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/ops_host.h"
#include "mla/kernels/ops.h"

namespace mla::kernels::ops {

using bf16_t = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(bf16_t v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16_t from_f32<bf16_t>(float v) {
  return __float2bfloat16_rn(v);
}

static_assert(kVecElements == 8, "load_vec/store_vec move 8 elements");

// p: 16-byte aligned (the host checked).
__device__ __forceinline__ void load_vec(const float* p, float (&v)[kVecElements]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load_vec(const bf16_t* p, float (&v)[kVecElements]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(pairs[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}
__device__ __forceinline__ void store_vec(float* p, const float (&v)[kVecElements]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store_vec(bf16_t* p, const float (&v)[kVecElements]) {
  uint4 raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) pairs[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Calls f(T{}) with T = float or __nv_bfloat16 as `type` says (host side of a launch).
template <typename F>
void dispatch_type(ScalarType type, F&& f) {
  if (type == ScalarType::kBF16) {
    f(bf16_t{});
  } else {
    f(float{});
  }
}

// Sum of v over the kThreads consecutive threads that share a row: warp shuffles, then (for more
// than one warp) the per-warp sums added in warp order through smem [kThreads / 32]. Every thread
// gets the same total. With kThreads > 32 the whole block must call it (it has __syncthreads).
template <int kThreads>
__device__ __forceinline__ float row_sum(float v, float* smem) {
  static_assert(kThreads == 32 || (kThreads % 32 == 0 && kThreads <= 1024));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if constexpr (kThreads == 32) {
    return v;
  } else {
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) smem[warp] = v;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) total += smem[w];
    __syncthreads();  // smem is reused by the next row
    return total;
  }
}

// Blocks for a grid-stride loop over `items` work items of `threads` threads each.
inline unsigned grid_for(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxGridBlocks ? (blocks > 0 ? blocks : 1)
                                                       : kMaxGridBlocks);
}

}  // namespace mla::kernels::ops
