// Internal to kernels/ops: the launch-shape decisions (pure host functions, CPU-tested) and the
// per-op kernel launchers that ops_api.cpp calls after validating the arguments.
//
// The one thing to know: `vec` (the 8-wide vector path) is decided here, on the host, from the
// actual pointers, strides and sizes; a launcher given vec = true trusts that every row start is
// 16-byte aligned and that the row length is a multiple of 8.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "mla/kernels/ops.h"

namespace mla::kernels::ops {

constexpr int kVecElements = 8;               // elements per vector access
constexpr int kBlockThreads = 256;            // threads per block of every op
constexpr int64_t kMaxGridBlocks = 65536;     // grid-stride loops cover the rest
constexpr int64_t kWarpPerRowMaxCols = 1024;  // norms: one warp per row up to this, else a block
constexpr int kMaxRotaryDim = 2 * kBlockThreads;  // rope: one thread per pair of a token

inline bool aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

// Whether 8-wide accesses at row starts and every 8th column stay 16-byte aligned: cols a
// multiple of 8, data 16-byte aligned, and the row stride a whole number of 16-byte units (a
// stride of 0, a broadcast, qualifies).
inline bool vector_ok(const void* data, ScalarType type, int64_t row_stride, int64_t cols) {
  const int64_t element = type == ScalarType::kBF16 ? 2 : 4;
  return cols % kVecElements == 0 && aligned16(data) && (row_stride * element) % 16 == 0;
}

// Threads that share one row in the norms: a warp for short rows, a block for long ones.
inline int norm_threads_per_row(int64_t cols) {
  return cols <= kWarpPerRowMaxCols ? 32 : kBlockThreads;
}

// The launchers; arguments are validated (ops_api.cpp) before these are called.
void launch_embedding_kernel(const bf16* table, int64_t vocab, int64_t hidden,
                             const int32_t* token_ids, int64_t tokens, const Strided2D& out,
                             bool vec, cudaStream_t stream);
void launch_rms_norm_kernel(const Strided2D& x, const bf16* weight, int64_t rows, int64_t cols,
                            float eps, const Strided2D& out, bool vec, cudaStream_t stream);
void launch_add_rms_norm_kernel(float* residual, int64_t residual_stride, const Strided2D& delta,
                                const bf16* weight, int64_t rows, int64_t cols, float eps,
                                const Strided2D& out, bool vec, cudaStream_t stream);
void launch_add_kernel(const Strided2D& x, const Strided2D& y, int64_t rows, int64_t cols, bool vec,
                       cudaStream_t stream);
void launch_silu_mul_kernel(const Strided2D& gate, const Strided2D& up, int64_t rows, int64_t cols,
                            const Strided2D& out, bool vec, cudaStream_t stream);
void launch_copy_kernel(const Strided3D& src, const Strided3D& dst, int64_t d0, int64_t d1,
                        int64_t d2, bool vec, cudaStream_t stream);
void launch_gather_rows_kernel(const Strided2D& x, const int32_t* rows, int64_t count, int64_t cols,
                               const Strided2D& out, bool vec, cudaStream_t stream);
void launch_rope_kernel(const Strided3D& x, const Strided3D& out, int64_t tokens, int64_t heads,
                        int rotary_dim, const int32_t* positions, const float* inv_freq,
                        float cos_sin_scale, cudaStream_t stream);
void launch_latent_cache_write_kernel(const LatentCacheWriteParams& params, cudaStream_t stream);
void launch_gather_latent_cache_kernel(const bf16* cache, int64_t cache_slot_stride,
                                       int64_t latent_dim, const int64_t* slots, int64_t count,
                                       const Strided2D& out, bool vec, cudaStream_t stream);
void launch_merge_attention_kernel(const Strided3D& out, float* lse, int64_t lse_row_stride,
                                   const Strided3D& part_out, const float* part_lse,
                                   int64_t part_lse_row_stride, int64_t rows, int64_t heads,
                                   int64_t d_v, cudaStream_t stream);

}  // namespace mla::kernels::ops
