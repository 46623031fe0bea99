// RMSNorm and the fused residual add + RMSNorm (mla/kernels/ops.h).
//
// kThreadsPerRow threads (a warp or a whole block) own a row: pass 1 sums the squares in fp32
// (per-thread partial sums, then a fixed-order tree), pass 2 re-reads the row (L1/L2-hot) and
// writes. Each thread reads and writes the same elements in both passes, which is what makes
// out == x (and, for add_rms_norm, out == delta and the residual update) safe without a barrier.
#include "cuda/check.h"
#include "ops/common.cuh"

namespace mla::kernels::ops {
namespace {

// Pass 2: out_row = src_row · inverse_rms · weight, each thread on the elements it summed.
template <int kThreadsPerRow, bool kVec, typename TS, typename TO>
__device__ __forceinline__ void write_normed_row(const TS* src_row, const bf16_t* weight,
                                                 float inverse_rms, int64_t cols, int lane,
                                                 TO* out_row) {
  if constexpr (kVec) {
    for (int64_t c = int64_t(lane) * kVecElements; c < cols; c += kThreadsPerRow * kVecElements) {
      float v[kVecElements], w[kVecElements];
      load_vec(src_row + c, v);
      load_vec(weight + c, w);
#pragma unroll
      for (int k = 0; k < kVecElements; ++k) v[k] = v[k] * inverse_rms * w[k];
      store_vec(out_row + c, v);
    }
  } else {
    for (int64_t c = lane; c < cols; c += kThreadsPerRow)
      out_row[c] = from_f32<TO>(to_f32(src_row[c]) * inverse_rms * to_f32(weight[c]));
  }
}

template <int kThreadsPerRow, bool kVec, typename TX, typename TO>
__global__ void __launch_bounds__(kBlockThreads)
    rms_norm_kernel(const TX* x, int64_t x_stride, const bf16_t* weight, int64_t rows, int64_t cols,
                    float eps, TO* out, int64_t out_stride) {
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  __shared__ float smem[kBlockThreads / 32];
  const int lane = threadIdx.x % kThreadsPerRow;
  // Rows are uniform per warp (kThreadsPerRow = 32) or per block (kThreadsPerRow = block).
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow; row < rows;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const TX* x_row = x + row * x_stride;
    TO* out_row = out + row * out_stride;
    float sum_squares = 0.f;
    if constexpr (kVec) {
      for (int64_t c = int64_t(lane) * kVecElements; c < cols; c += kThreadsPerRow * kVecElements) {
        float v[kVecElements];
        load_vec(x_row + c, v);
#pragma unroll
        for (int k = 0; k < kVecElements; ++k) sum_squares += v[k] * v[k];
      }
    } else {
      for (int64_t c = lane; c < cols; c += kThreadsPerRow) {
        const float v = to_f32(x_row[c]);
        sum_squares += v * v;
      }
    }
    sum_squares = row_sum<kThreadsPerRow>(sum_squares, smem);
    const float inverse_rms = 1.f / sqrtf(sum_squares / static_cast<float>(cols) + eps);
    write_normed_row<kThreadsPerRow, kVec>(x_row, weight, inverse_rms, cols, lane, out_row);
  }
}

template <int kThreadsPerRow, bool kVec, typename TD, typename TO>
__global__ void __launch_bounds__(kBlockThreads)
    add_rms_norm_kernel(float* residual, int64_t residual_stride, const TD* delta,
                        int64_t delta_stride, const bf16_t* weight, int64_t rows, int64_t cols,
                        float eps, TO* out, int64_t out_stride) {
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  __shared__ float smem[kBlockThreads / 32];
  const int lane = threadIdx.x % kThreadsPerRow;
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow; row < rows;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    float* residual_row = residual + row * residual_stride;
    const TD* delta_row = delta + row * delta_stride;
    TO* out_row = out + row * out_stride;
    float sum_squares = 0.f;
    if constexpr (kVec) {
      for (int64_t c = int64_t(lane) * kVecElements; c < cols; c += kThreadsPerRow * kVecElements) {
        float r[kVecElements], d[kVecElements];
        load_vec(residual_row + c, r);
        load_vec(delta_row + c, d);
#pragma unroll
        for (int k = 0; k < kVecElements; ++k) {
          r[k] += d[k];
          sum_squares += r[k] * r[k];
        }
        store_vec(residual_row + c, r);
      }
    } else {
      for (int64_t c = lane; c < cols; c += kThreadsPerRow) {
        const float r = residual_row[c] + to_f32(delta_row[c]);
        residual_row[c] = r;
        sum_squares += r * r;
      }
    }
    sum_squares = row_sum<kThreadsPerRow>(sum_squares, smem);
    const float inverse_rms = 1.f / sqrtf(sum_squares / static_cast<float>(cols) + eps);
    // Each thread re-reads the residual values it wrote itself.
    write_normed_row<kThreadsPerRow, kVec>(residual_row, weight, inverse_rms, cols, lane, out_row);
  }
}

// Calls f(std::integral_constant<int, threads per row>, std::bool_constant<vec>).
template <typename F>
void dispatch_row_shape(int64_t cols, bool vec, F&& f) {
  const bool warp = norm_threads_per_row(cols) == 32;
  if (warp && vec) f(std::integral_constant<int, 32>{}, std::true_type{});
  if (warp && !vec) f(std::integral_constant<int, 32>{}, std::false_type{});
  if (!warp && vec) f(std::integral_constant<int, kBlockThreads>{}, std::true_type{});
  if (!warp && !vec) f(std::integral_constant<int, kBlockThreads>{}, std::false_type{});
}

}  // namespace

void launch_rms_norm_kernel(const Strided2D& x, const bf16* weight, int64_t rows, int64_t cols,
                            float eps, const Strided2D& out, bool vec, cudaStream_t stream) {
  dispatch_type(x.type, [&](auto x_tag) {
    dispatch_type(out.type, [&](auto out_tag) {
      using TX = decltype(x_tag);
      using TO = decltype(out_tag);
      dispatch_row_shape(cols, vec, [&](auto threads_per_row, auto vec_path) {
        constexpr int kThreadsPerRow = decltype(threads_per_row)::value;
        const unsigned grid = grid_for(rows, kBlockThreads / kThreadsPerRow);
        rms_norm_kernel<kThreadsPerRow, decltype(vec_path)::value, TX, TO>
            <<<grid, kBlockThreads, 0, stream>>>(static_cast<const TX*>(x.data), x.row_stride,
                                                 reinterpret_cast<const bf16_t*>(weight), rows,
                                                 cols, eps, static_cast<TO*>(out.data),
                                                 out.row_stride);
      });
    });
  });
  MLA_CHECK_LAUNCH("rms_norm");
}

void launch_add_rms_norm_kernel(float* residual, int64_t residual_stride, const Strided2D& delta,
                                const bf16* weight, int64_t rows, int64_t cols, float eps,
                                const Strided2D& out, bool vec, cudaStream_t stream) {
  dispatch_type(delta.type, [&](auto delta_tag) {
    dispatch_type(out.type, [&](auto out_tag) {
      using TD = decltype(delta_tag);
      using TO = decltype(out_tag);
      dispatch_row_shape(cols, vec, [&](auto threads_per_row, auto vec_path) {
        constexpr int kThreadsPerRow = decltype(threads_per_row)::value;
        const unsigned grid = grid_for(rows, kBlockThreads / kThreadsPerRow);
        add_rms_norm_kernel<kThreadsPerRow, decltype(vec_path)::value, TD, TO>
            <<<grid, kBlockThreads, 0, stream>>>(
                residual, residual_stride, static_cast<const TD*>(delta.data), delta.row_stride,
                reinterpret_cast<const bf16_t*>(weight), rows, cols, eps,
                static_cast<TO*>(out.data), out.row_stride);
      });
    });
  });
  MLA_CHECK_LAUNCH("add_rms_norm");
}

}  // namespace mla::kernels::ops
