// Device side of mla/kernels/fill.h.
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "mla/kernels/fill.h"

namespace mla::kernels {
namespace {

__global__ void fill_random_bf16_kernel(__nv_bfloat16* data, size_t count, uint64_t seed,
                                        float scale, float clip) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    data[i] = __float2bfloat16_rn(random_fill_value(seed, i, scale, clip));
}

}  // namespace

void launch_fill_random_bf16(bf16* data, size_t count, const RandomFillSpec& spec,
                             cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  const size_t blocks = (count + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65536 ? blocks : 65536);
  fill_random_bf16_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(data),
                                                         count, spec.seed, spec.scale(), spec.clip);
  MLA_CHECK_LAUNCH("fill_random_bf16");
}

}  // namespace mla::kernels
