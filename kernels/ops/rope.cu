// RoPE in DeepSeek's interleaved layout (in place or out of place) and the fused MLA latent cache
// write (mla/kernels/ops.h).
//
// Angles are the fp32 product positions[t] · inv_freq[i], exactly as the CPU twin forms it, and
// go through precise sincosf (full range reduction): with YaRN, positions reach 163840 and the
// fast __sinf would be off by far more than bf16 can hide.
#include "cuda/check.h"
#include "ops/common.cuh"

namespace mla::kernels::ops {
namespace {

// Rotates pair (even, odd) of `in` by the angle whose cos and sin are given, into `out` (which
// may be `in`: both values are read before either is written).
template <typename TI, typename TO>
__device__ __forceinline__ void rotate_pair(const TI* in, TO* out, float cos_value,
                                            float sin_value) {
  const float even = to_f32(in[0]);
  const float odd = to_f32(in[1]);
  out[0] = from_f32<TO>(even * cos_value - odd * sin_value);
  out[1] = from_f32<TO>(odd * cos_value + even * sin_value);
}

__device__ __forceinline__ void rope_cos_sin(int32_t position, float inv_freq, float scale,
                                             float* cos_value, float* sin_value) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  float s, c;
  sincosf(angle, &s, &c);
  *cos_value = c * scale;
  *sin_value = s * scale;
}

// One block per token (grid-stride): thread k owns pair k % half of heads k / half, k / half +
// groups, ... with groups = blockDim / half; threads past groups · half idle. In place when out
// is x (same strides, checked by the launcher).
template <typename TI, typename TO>
__global__ void __launch_bounds__(kBlockThreads)
    rope_kernel(const TI* x, int64_t x_token_stride, int64_t x_head_stride, TO* out,
                int64_t out_token_stride, int64_t out_head_stride, int64_t tokens, int64_t heads,
                int half, const int32_t* positions, const float* inv_freq, float scale) {
  const int pair = threadIdx.x % half;
  const int head_group = threadIdx.x / half;
  const int groups = kBlockThreads / half;
  if (head_group >= groups) return;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    float cos_value, sin_value;
    rope_cos_sin(positions[t], inv_freq[pair], scale, &cos_value, &sin_value);
    for (int64_t h = head_group; h < heads; h += groups)
      rotate_pair(x + t * x_token_stride + h * x_head_stride + 2 * pair,
                  out + t * out_token_stride + h * out_head_stride + 2 * pair, cos_value,
                  sin_value);
  }
}

// One block per token (grid-stride, uniform per block): the kv_c norm as in rms_norm_kernel's
// scalar path, then the k_pe rotation by the first rope_dim / 2 threads.
template <typename TKV, typename TO>
__global__ void __launch_bounds__(kBlockThreads)
    latent_cache_write_kernel(const TKV* kv_a, int64_t kv_a_stride, const bf16_t* weight, float eps,
                              int rank, int rope_dim, const int32_t* positions,
                              const float* inv_freq, float scale, const int64_t* slots,
                              int64_t tokens, TO* latent_out, int64_t latent_out_stride,
                              bf16_t* cache, int64_t cache_slot_stride, int64_t num_slots) {
  __shared__ float smem[kBlockThreads / 32];
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const TKV* row = kv_a + t * kv_a_stride;
    float sum_squares = 0.f;
    for (int c = threadIdx.x; c < rank; c += kBlockThreads) {
      const float v = to_f32(row[c]);
      sum_squares += v * v;
    }
    sum_squares = row_sum<kBlockThreads>(sum_squares, smem);
    const float inverse_rms = 1.f / sqrtf(sum_squares / static_cast<float>(rank) + eps);
    const int64_t slot = slots[t];
    bf16_t* cache_row = slot >= 0 && slot < num_slots ? cache + slot * cache_slot_stride : nullptr;
    TO* out_row = latent_out != nullptr ? latent_out + t * latent_out_stride : nullptr;
    for (int c = threadIdx.x; c < rank; c += kBlockThreads) {
      const float y = to_f32(row[c]) * inverse_rms * to_f32(weight[c]);
      if (out_row != nullptr) out_row[c] = from_f32<TO>(y);
      if (cache_row != nullptr) cache_row[c] = __float2bfloat16_rn(y);
    }
    for (int i = threadIdx.x; i < rope_dim / 2; i += kBlockThreads) {
      float cos_value, sin_value;
      rope_cos_sin(positions[t], inv_freq[i], scale, &cos_value, &sin_value);
      const float even = to_f32(row[rank + 2 * i]);
      const float odd = to_f32(row[rank + 2 * i + 1]);
      const float rotated_even = even * cos_value - odd * sin_value;
      const float rotated_odd = odd * cos_value + even * sin_value;
      if (out_row != nullptr) {
        out_row[rank + 2 * i] = from_f32<TO>(rotated_even);
        out_row[rank + 2 * i + 1] = from_f32<TO>(rotated_odd);
      }
      if (cache_row != nullptr) {
        cache_row[rank + 2 * i] = __float2bfloat16_rn(rotated_even);
        cache_row[rank + 2 * i + 1] = __float2bfloat16_rn(rotated_odd);
      }
    }
  }
}

}  // namespace

void launch_rope_kernel(const Strided3D& x, const Strided3D& out, int64_t tokens, int64_t heads,
                        int rotary_dim, const int32_t* positions, const float* inv_freq,
                        float cos_sin_scale, cudaStream_t stream) {
  dispatch_type(x.type, [&](auto x_tag) {
    dispatch_type(out.type, [&](auto out_tag) {
      using TI = decltype(x_tag);
      using TO = decltype(out_tag);
      rope_kernel<TI, TO><<<grid_for(tokens, 1), kBlockThreads, 0, stream>>>(
          static_cast<const TI*>(x.data), x.stride0, x.stride1, static_cast<TO*>(out.data),
          out.stride0, out.stride1, tokens, heads, rotary_dim / 2, positions, inv_freq,
          cos_sin_scale);
    });
  });
  MLA_CHECK_LAUNCH("rope");
}

void launch_latent_cache_write_kernel(const LatentCacheWriteParams& p, cudaStream_t stream) {
  dispatch_type(p.kv_a.type, [&](auto kv_tag) {
    dispatch_type(p.latent_out.type, [&](auto out_tag) {
      using TKV = decltype(kv_tag);
      using TO = decltype(out_tag);
      latent_cache_write_kernel<TKV, TO><<<grid_for(p.tokens, 1), kBlockThreads, 0, stream>>>(
          static_cast<const TKV*>(p.kv_a.data), p.kv_a.row_stride,
          reinterpret_cast<const bf16_t*>(p.kv_norm_weight), p.eps, p.kv_lora_rank, p.rope_dim,
          p.positions, p.inv_freq, p.cos_sin_scale, p.slots, p.tokens,
          static_cast<TO*>(p.latent_out.data), p.latent_out.row_stride,
          reinterpret_cast<bf16_t*>(p.cache), p.cache_slot_stride, p.num_slots);
    });
  });
  MLA_CHECK_LAUNCH("latent_cache_write");
}

}  // namespace mla::kernels::ops
