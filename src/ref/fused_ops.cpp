// CPU twins of the fused GPU ops; see fused_ops.h.
#include "ref/fused_ops.h"

#include <vector>

#include "ref/ops.h"
#include "ref/rope.h"

namespace mla::ref {

void add_rms_norm(float* residual, int64_t residual_stride, const float* delta,
                  int64_t delta_stride, const float* weight, int64_t rows, int64_t cols, float eps,
                  float* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      residual[r * residual_stride + c] += delta[r * delta_stride + c];
  rms_norm(residual, residual_stride, weight, rows, cols, eps, out, out_stride);
}

void latent_cache_write(const LatentCacheWriteArgs& a) {
  const int64_t latent_dim = int64_t(a.kv_lora_rank) + a.rope_dim;
  std::vector<float> latent(static_cast<size_t>(latent_dim));
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float* row = a.kv_a + t * a.kv_a_stride;
    rms_norm(row, 0, a.kv_norm_weight, 1, a.kv_lora_rank, a.eps, latent.data(), 0);
    for (int j = 0; j < a.rope_dim; ++j) latent[a.kv_lora_rank + j] = row[a.kv_lora_rank + j];
    apply_rope(latent.data() + a.kv_lora_rank, 1, 0, 1, 0, a.rope_dim, a.positions + t, a.inv_freq,
               a.cos_sin_scale);
    if (a.latent_out != nullptr)
      for (int64_t j = 0; j < latent_dim; ++j)
        a.latent_out[t * a.latent_out_stride + j] = latent[j];
    const int64_t slot = a.slots[t];
    if (slot < 0 || slot >= a.num_slots) continue;
    for (int64_t j = 0; j < latent_dim; ++j) a.cache[slot * a.cache_slot_stride + j] = latent[j];
  }
}

}  // namespace mla::ref
