// dst[indices[r]] = bf16(src[r]) for each row r with indices[r] >= 0 (see scatter_rows.h).
// One CTA per row; an index past the table traps (our own invariant: the step plan validated it).
// The arguments were validated by launch_scatter_rows (scatter_rows.cpp: fmt stays out of nvcc).
#include <cuda_bf16.h>

#include <type_traits>

#include "cuda/check.h"
#include "mla/kernels/scatter_rows.h"

namespace mla::kernels {
namespace {

template <typename T>
__device__ float load_as_float(const T* p) {
  if constexpr (std::is_same_v<T, float>)
    return *p;
  else
    return __bfloat162float(*p);
}

template <typename T>
__global__ void scatter_rows_kernel(const __grid_constant__ ScatterRowsParams p) {
  const int64_t row = blockIdx.x;
  const int64_t index = p.indices[row];
  if (index < 0) return;
  if (index >= p.num_dst_rows) __trap();
  const T* src = static_cast<const T*>(p.src) + row * p.src_row_stride;
  __nv_bfloat16* dst = reinterpret_cast<__nv_bfloat16*>(p.dst) + index * p.dst_row_stride;
  for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x)
    dst[c] = __float2bfloat16_rn(load_as_float(src + c));
}

}  // namespace

void launch_scatter_rows_kernel(const ScatterRowsParams& params, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(params.rows));
  if (params.src_type == ScalarType::kF32)
    scatter_rows_kernel<float><<<grid, 128, 0, stream>>>(params);
  else
    scatter_rows_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(params);
  MLA_CHECK_LAUNCH("scatter_rows");
}

}  // namespace mla::kernels
