// Naive fp32 CPU versions of the dense per-token ops of a DeepSeek layer: the CPU backend's
// arithmetic and the oracle for the GPU kernels to come.
//
// Matrices are row-major with an explicit row stride (elements), so a view into a wider buffer
// (kv_c inside the 576-wide kv_a output) needs no copy. Dot products and the RMS accumulate in
// double: these ops are the exact side of every comparison, so they spend precision, not speed.
#pragma once

#include <cstdint>

namespace mla::ref {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) · weight, for `rows` rows of `cols` values.
void rms_norm(const float* x, int64_t x_stride, const float* weight, int64_t rows, int64_t cols,
              float eps, float* out, int64_t out_stride);

// out = x · weightᵀ: x [rows, in], weight [out_features, in] (a Hugging Face Linear), out [rows,
// out_features].
void linear(const float* x, int64_t x_stride, const float* weight, int64_t rows, int64_t in,
            int64_t out_features, float* out, int64_t out_stride);

// out = silu(gate) · up, elementwise over `count` values; silu(g) = g / (1 + e^-g).
void silu_mul(const float* gate, const float* up, int64_t count, float* out);

// Per-head matrix products, all heads in one call (the absorbed-MLA matmuls):
//   transpose_b = false: out[t][h][n] = Σ_k a[t][h][k] · b[h][k][n]   (b is [heads, k, n])
//   transpose_b = true:  out[t][h][n] = Σ_k a[t][h][k] · b[h][n][k]   (b is [heads, n, k])
// Strides in elements: a (t, h), b (h, row), out (t, h); the innermost dimension is contiguous.
struct HeadMatmulArgs {
  int64_t tokens = 0, heads = 0, k = 0, n = 0;
  bool transpose_b = false;
  const float* a = nullptr;
  int64_t a_token_stride = 0, a_head_stride = 0;
  const float* b = nullptr;
  int64_t b_head_stride = 0, b_row_stride = 0;
  float* out = nullptr;
  int64_t out_token_stride = 0, out_head_stride = 0;
};
void head_matmul(const HeadMatmulArgs& args);

}  // namespace mla::ref
