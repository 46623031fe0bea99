// Dense fp32 reference ops; see ops.h.
#include "ref/ops.h"

#include <cmath>
#include <vector>

namespace mla::ref {
namespace {

// Below about a million multiply-adds a parallel region costs more than it saves (and with more
// threads than free cores, spinning OpenMP threads cost far more): stay on one thread.
constexpr int64_t kParallelWork = int64_t(1) << 20;

}  // namespace

void rms_norm(const float* x, int64_t x_stride, const float* weight, int64_t rows, int64_t cols,
              float eps, float* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * x_stride;
    double sum_squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum_squares += double(row[c]) * row[c];
    const double inverse_rms = 1.0 / std::sqrt(sum_squares / cols + eps);
    float* result = out + r * out_stride;
    for (int64_t c = 0; c < cols; ++c)
      result[c] = static_cast<float>(row[c] * inverse_rms) * weight[c];
  }
}

void linear(const float* x, int64_t x_stride, const float* weight, int64_t rows, int64_t in,
            int64_t out_features, float* out, int64_t out_stride) {
  const bool parallel = rows * in * out_features >= kParallelWork;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_features; ++o) {
      const float* row = x + r * x_stride;
      const float* w = weight + o * in;
      double sum = 0.0;
      for (int64_t i = 0; i < in; ++i) sum += double(row[i]) * w[i];
      out[r * out_stride + o] = static_cast<float>(sum);
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void head_matmul(const HeadMatmulArgs& args) {
  const bool parallel = args.tokens * args.heads * args.k * args.n >= kParallelWork;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t t = 0; t < args.tokens; ++t) {
    for (int64_t h = 0; h < args.heads; ++h) {
      const float* a = args.a + t * args.a_token_stride + h * args.a_head_stride;
      const float* b = args.b + h * args.b_head_stride;
      float* out = args.out + t * args.out_token_stride + h * args.out_head_stride;
      if (args.transpose_b) {
        for (int64_t n = 0; n < args.n; ++n) {
          const float* b_row = b + n * args.b_row_stride;
          double sum = 0.0;
          for (int64_t k = 0; k < args.k; ++k) sum += double(a[k]) * b_row[k];
          out[n] = static_cast<float>(sum);
        }
      } else {
        // Row by row of b, so memory is read in order.
        std::vector<double> sums(static_cast<size_t>(args.n), 0.0);
        for (int64_t k = 0; k < args.k; ++k) {
          const double a_k = a[k];
          const float* b_row = b + k * args.b_row_stride;
          for (int64_t n = 0; n < args.n; ++n) sums[n] += a_k * b_row[n];
        }
        for (int64_t n = 0; n < args.n; ++n) out[n] = static_cast<float>(sums[n]);
      }
    }
  }
}

}  // namespace mla::ref
