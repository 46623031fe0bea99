// CPU twins of the fused GPU ops (kernels/include/mla/kernels/ops.h) that have no plain ref op:
// the residual add + norm and the MLA latent cache write.
//
// Plain loops over the existing twins (rms_norm, apply_rope), so "fused" changes nothing but the
// number of passes: a fused kernel must match the unfused sequence.
#pragma once

#include <cstdint>

#include "core/dtypes.h"

namespace mla::ref {

// residual += delta (fp32 adds), then out = rms_norm(residual) · weight (as ref::rms_norm).
void add_rms_norm(float* residual, int64_t residual_stride, const float* delta,
                  int64_t delta_stride, const float* weight, int64_t rows, int64_t cols, float eps,
                  float* out, int64_t out_stride);

// latent[t] = [rms_norm(kv_c[t]) · kv_norm_weight | rope(k_pe[t])] with kv_c = kv_a[t][0, rank)
// and k_pe = kv_a[t][rank, rank + rope_dim); written to latent_out[t] (when not null) and to
// cache[slots[t]] when 0 <= slots[t] < num_slots (other cache rows untouched).
struct LatentCacheWriteArgs {
  const float* kv_a = nullptr;  // [tokens, kv_lora_rank + rope_dim]
  int64_t kv_a_stride = 0;
  const float* kv_norm_weight = nullptr;  // [kv_lora_rank]
  float eps = 1e-6f;
  int kv_lora_rank = 0;
  int rope_dim = 0;
  const int32_t* positions = nullptr;  // [tokens]
  const float* inv_freq = nullptr;     // [rope_dim / 2]
  float cos_sin_scale = 1.f;
  const int64_t* slots = nullptr;  // [tokens]
  int64_t tokens = 0;
  float* latent_out = nullptr;  // [tokens, latent_dim] or null
  int64_t latent_out_stride = 0;
  float* cache = nullptr;  // [num_slots, latent_dim]
  int64_t cache_slot_stride = 0;
  int64_t num_slots = 0;
};
void latent_cache_write(const LatentCacheWriteArgs& args);

}  // namespace mla::ref
