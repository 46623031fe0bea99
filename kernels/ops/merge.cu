// LSE merge of two partial attention results (mla/kernels/ops.h; twin: ref::
// merge_attention_partial).
//
// One warp per (row, head): every lane reads both LSEs, the lanes stride over d_v, and lane 0
// writes the merged LSE after a __syncwarp, so no lane can still be reading the old one. An empty
// part (lse ±inf, weight exactly 0) is never read, so its values may be NaN.
#include "cuda/check.h"
#include "ops/common.cuh"

namespace mla::kernels::ops {
namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;

template <typename TO, typename TP>
__global__ void __launch_bounds__(kBlockThreads)
    merge_attention_kernel(TO* out, int64_t out_stride0, int64_t out_stride1, float* lse,
                           int64_t lse_row_stride, const TP* part, int64_t part_stride0,
                           int64_t part_stride1, const float* part_lse, int64_t part_lse_row_stride,
                           int64_t rows, int64_t heads, int64_t d_v) {
  const int lane = threadIdx.x % 32;
  for (int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; item < rows * heads;
       item += int64_t(gridDim.x) * kWarpsPerBlock) {
    const int64_t r = item / heads;
    const int64_t h = item - r * heads;
    float* lse_a = lse + r * lse_row_stride + h;
    const float lse_b = part_lse[r * part_lse_row_stride + h];
    const float a = isinf(*lse_a) ? -INFINITY : *lse_a;  // +inf (empty) counts as -inf
    const float b = isinf(lse_b) ? -INFINITY : lse_b;
    TO* out_row = out + r * out_stride0 + h * out_stride1;
    const TP* part_row = part + r * part_stride0 + h * part_stride1;
    float merged_lse;
    if (a == -INFINITY && b == -INFINITY) {
      for (int64_t d = lane; d < d_v; d += 32) out_row[d] = from_f32<TO>(0.f);
      merged_lse = -INFINITY;
    } else {
      const float m = fmaxf(a, b);
      const float wa = expf(a - m);
      const float wb = expf(b - m);
      const float total = wa + wb;
      for (int64_t d = lane; d < d_v; d += 32) {
        const float va = wa == 0.f ? 0.f : wa * to_f32(out_row[d]);
        const float vb = wb == 0.f ? 0.f : wb * to_f32(part_row[d]);
        out_row[d] = from_f32<TO>((va + vb) / total);
      }
      merged_lse = m + logf(total);
    }
    __syncwarp();
    if (lane == 0) *lse_a = merged_lse;
  }
}

}  // namespace

void launch_merge_attention_kernel(const Strided3D& out, float* lse, int64_t lse_row_stride,
                                   const Strided3D& part_out, const float* part_lse,
                                   int64_t part_lse_row_stride, int64_t rows, int64_t heads,
                                   int64_t d_v, cudaStream_t stream) {
  dispatch_type(out.type, [&](auto out_tag) {
    dispatch_type(part_out.type, [&](auto part_tag) {
      using TO = decltype(out_tag);
      using TP = decltype(part_tag);
      merge_attention_kernel<TO, TP>
          <<<grid_for(rows * heads, kWarpsPerBlock), kBlockThreads, 0, stream>>>(
              static_cast<TO*>(out.data), out.stride0, out.stride1, lse, lse_row_stride,
              static_cast<const TP*>(part_out.data), part_out.stride0, part_out.stride1, part_lse,
              part_lse_row_stride, rows, heads, d_v);
    });
  });
  MLA_CHECK_LAUNCH("merge_attention");
}

}  // namespace mla::kernels::ops
