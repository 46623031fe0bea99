// Device side of mla/kernels/sm_stream.h.
#include "common/ptx.cuh"
#include "cuda/check.h"
#include "mla/kernels/sm_stream.h"

namespace mla::kernels {
namespace {

constexpr int kStreamThreads = 1024;
constexpr int kLoadsInFlight = 8;  // 16-byte loads per thread: 128 KB in flight per SM
// Enough dynamic shared memory that an SM holds one CTA (sm_90: 228 KB per SM).
constexpr int kStreamSmemBytes = 160 * 1024;

__global__ void __launch_bounds__(kStreamThreads, 1)
    sm_stream_kernel(const uint4* src, size_t vectors_per_cta, uint64_t* records) {
  extern __shared__ uint64_t warp_checksums[];  // the rest is there for occupancy only
  const uint4* slice = src + blockIdx.x * vectors_per_cta;
  __syncthreads();
  const uint64_t start = ptx::global_timer_ns();
  uint64_t checksum = 0;
  for (size_t base = threadIdx.x; base < vectors_per_cta;
       base += size_t(kStreamThreads) * kLoadsInFlight) {
    uint4 v[kLoadsInFlight];
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; ++k) {
      const size_t i = base + size_t(k) * kStreamThreads;
      v[k] = i < vectors_per_cta ? __ldcs(slice + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; ++k)
      checksum ^= (uint64_t(v[k].y) << 32 | v[k].x) ^ (uint64_t(v[k].w) << 32 | v[k].z);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    checksum ^= __shfl_xor_sync(0xffffffffu, checksum, offset);
  if ((threadIdx.x & 31) == 0) warp_checksums[threadIdx.x >> 5] = checksum;
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint64_t end = ptx::global_timer_ns();
    uint64_t total = 0;
    for (int w = 0; w < kStreamThreads / 32; ++w) total ^= warp_checksums[w];
    uint64_t* record = records + size_t(blockIdx.x) * kSmStreamRecordWords;
    record[0] = ptx::sm_id();
    record[1] = start;
    record[2] = end;
    record[3] = total;
  }
}

}  // namespace

void launch_sm_stream(const uint64_t* src, size_t words_per_cta, int ctas, uint64_t* records,
                      cudaStream_t stream) {
  MLA_CUDA_CHECK(cudaFuncSetAttribute(sm_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kStreamSmemBytes));
  sm_stream_kernel<<<ctas, kStreamThreads, kStreamSmemBytes, stream>>>(
      reinterpret_cast<const uint4*>(src), words_per_cta / 2, records);
  MLA_CHECK_LAUNCH("sm_stream");
}

}  // namespace mla::kernels
