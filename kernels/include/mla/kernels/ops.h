// The dense per-token ops of the DeepSeek forward on the GPU: the host API (plain C++).
//
// Element types: activations are ScalarType (fp32 or bf16, chosen at run time, per argument),
// weights and the latent cache are bf16, the residual stream is fp32, and all math is fp32. Every
// pointer is a device pointer (index arrays too); sizes are host integers; strides are in
// elements with the innermost dimension contiguous. Every launch is asynchronous on `stream`,
// allocates nothing and never synchronises, so a whole forward step can be captured in a CUDA
// graph. Arguments are validated here, once (mla::Error naming the argument); the kernels trust
// them. The one subtle thing: index arrays (token ids, rows, slots, positions) live on the device,
// so they cannot be validated on the host; kernels skip or zero what would fall out of bounds
// where a bound is known (documented per op) and trust the caller where none is.
//
// CPU twins: ref::rms_norm, ref::silu_mul, ref::apply_rope, ref::merge_attention_partial
// (src/ref/ops.h, rope.h, attention_merge.h) and ref::add_rms_norm, ref::latent_cache_write
// (src/ref/fused_ops.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtypes.h"
#include "mla/kernels/scalar_type.h"

namespace mla::kernels {

// Bytes of one element of `type`.
int scalar_type_size(ScalarType type);
const char* to_string(ScalarType type);

// A [rows, cols] matrix: element (r, c) at data + r · row_stride + c (elements of `type`).
struct Strided2D {
  void* data = nullptr;  // [rows, cols] `type`
  ScalarType type = ScalarType::kF32;
  int64_t row_stride = 0;
};

// A [d0, d1, d2] tensor: element (i, j, k) at data + i · stride0 + j · stride1 + k.
struct Strided3D {
  void* data = nullptr;  // [d0, d1, d2] `type`
  ScalarType type = ScalarType::kF32;
  int64_t stride0 = 0, stride1 = 0;
};

// out[t] = table[token_ids[t]] for t < tokens; table bf16 [vocab, hidden] contiguous. An id
// outside [0, vocab) gives a row of zeros (never a read out of bounds).
void launch_embedding(const bf16* table, int64_t vocab, int64_t hidden, const int32_t* token_ids,
                      int64_t tokens, Strided2D out, cudaStream_t stream);

// out = x / sqrt(mean(x²) + eps) · weight over `rows` rows of `cols` values; weight bf16 [cols].
// In place allowed (out.data == x.data with the same type and row stride). The sum of squares is
// an fp32 tree reduction, so results differ from the double-precision twin by a few fp32 ulps.
void launch_rms_norm(Strided2D x, const bf16* weight, int64_t rows, int64_t cols, float eps,
                     Strided2D out, cudaStream_t stream);

// Fused residual add and norm: residual += delta (fp32 add, bit-identical to the twin), then
// out = rms_norm(residual) · weight. residual fp32 [rows, cols] with row stride residual_stride;
// out may alias delta (same type and stride), never residual.
void launch_add_rms_norm(float* residual, int64_t residual_stride, Strided2D delta,
                         const bf16* weight, int64_t rows, int64_t cols, float eps, Strided2D out,
                         cudaStream_t stream);

// x += y elementwise over [rows, cols] (fp32 add, rounded to x's type).
void launch_add(Strided2D x, Strided2D y, int64_t rows, int64_t cols, cudaStream_t stream);

// out = silu(gate) · up over [rows, cols]; silu(g) = g / (1 + e^-g). out may alias gate or up
// (same type and stride).
void launch_silu_mul(Strided2D gate, Strided2D up, int64_t rows, int64_t cols, Strided2D out,
                     cudaStream_t stream);

// dst[i][j][k] = src[i][j][k] converted to dst's type, over [d0, d1, d2]. src strides may be 0
// (broadcast); the innermost dimension is contiguous in both. src and dst must not overlap.
void launch_copy(Strided3D src, Strided3D dst, int64_t d0, int64_t d1, int64_t d2,
                 cudaStream_t stream);

// out[i] = x[rows[i]] for i < count ([count, cols]); rows int32 [count] device. A negative row
// gives zeros; other rows are trusted to be rows of x (x's row count is not known here). out must
// not overlap x.
void launch_gather_rows(Strided2D x, const int32_t* rows, int64_t count, int64_t cols,
                        Strided2D out, cudaStream_t stream);

// In-place RoPE in DeepSeek's interleaved layout (src/ref/rope.h): pair (2i, 2i+1) of every head
// is rotated by the fp32 angle positions[t] · inv_freq[i], cos and sin times cos_sin_scale.
// Element (t, h, j) at x + t · token_stride + h · head_stride + j; positions int32 [tokens],
// inv_freq fp32 [rotary_dim / 2]. Uses precise sincosf (positions reach 163840 with YaRN).
void launch_rope(void* x, ScalarType type, int64_t tokens, int64_t token_stride, int64_t heads,
                 int64_t head_stride, int rotary_dim, const int32_t* positions,
                 const float* inv_freq, float cos_sin_scale, cudaStream_t stream);

// RoPE out of place: out(t, h, j) = x(t, h, j) rotated as above, both [tokens, heads, rotary_dim]
// with their own strides (stride0 per token, stride1 per head) and types (fp32 math, rounded to
// out's type); only out's rotary values are written. out may be x only as the same view (then it
// is the in-place op above); otherwise the two must not overlap. The model ropes the decode rows'
// q_pe straight into the absorbed query's pe slice with it (positions offset by the first row).
void launch_rope(Strided3D x, Strided3D out, int64_t tokens, int64_t heads, int rotary_dim,
                 const int32_t* positions, const float* inv_freq, float cos_sin_scale,
                 cudaStream_t stream);

// The fused MLA latent write. From kv_a [T, kv_lora_rank + rope_dim] (kv_a_proj_with_mqa's
// output): latent = [rms_norm(kv_c) · kv_norm_weight | rope(k_pe)] (latent_dim = kv_lora_rank +
// rope_dim), written to latent_out [T, latent_dim] (if latent_out.data is not null; the prefill
// path reads it) and to cache row slots[t] (slot = page · page_size + offset). A slot outside
// [0, num_slots) is skipped (negative = padding): such rows of the cache are never touched.
// latent_out of type kF32 receives the values before bf16 rounding.
struct LatentCacheWriteParams {
  Strided2D kv_a;                        // [T, kv_lora_rank + rope_dim] activations
  const bf16* kv_norm_weight = nullptr;  // [kv_lora_rank] bf16 (kv_a_layernorm.weight)
  float eps = 1e-6f;                     // rms_norm_eps
  int kv_lora_rank = 512;                // kv_lora_rank
  int rope_dim = 64;                     // qk_rope_head_dim
  const int32_t* positions = nullptr;    // [T] int32
  const float* inv_freq = nullptr;       // [rope_dim / 2] fp32
  float cos_sin_scale = 1.f;
  const int64_t* slots = nullptr;  // [T] int64 cache rows; < 0 or >= num_slots: skipped
  int64_t tokens = 0;              // T
  Strided2D latent_out;            // [T, latent_dim] activations; data may be null
  bf16* cache = nullptr;           // [num_slots, latent_dim] bf16, row stride cache_slot_stride
  int64_t cache_slot_stride = 0;
  int64_t num_slots = 0;
};
void launch_latent_cache_write(const LatentCacheWriteParams& params, cudaStream_t stream);

// out[i] = cache[slots[i]] converted to out's type ([count, latent_dim]); cache bf16
// [num_slots, latent_dim] with row stride cache_slot_stride, slots int64 [count]. A negative slot
// gives a row of zeros; other slots are trusted (the cache's size is not known here).
void launch_gather_latent_cache(const bf16* cache, int64_t cache_slot_stride, int64_t latent_dim,
                                const int64_t* slots, int64_t count, Strided2D out,
                                cudaStream_t stream);

// LSE merge of partial attention results (src/ref/attention_merge.h): for every (row, head),
// (out, lse) <- merge((out, lse), (part_out, part_lse)). ±inf lse means an empty part; both empty
// gives out = 0, lse = -inf. out and part_out [rows, heads, d_v] (d0 = rows, d1 = heads,
// d2 = d_v); lse and part_lse fp32 [rows, heads], heads contiguous, with the given row strides.
// An empty part's values are never used (they may hold NaN).
void launch_merge_attention(Strided3D out, float* lse, int64_t lse_row_stride, Strided3D part_out,
                            const float* part_lse, int64_t part_lse_row_stride, int64_t rows,
                            int64_t heads, int64_t d_v, cudaStream_t stream);

}  // namespace mla::kernels
