// Device side of mla/kernels/sm_stream.h.
#include <algorithm>
#include <stdexcept>

#include "common/ptx.cuh"
#include "cuda/check.h"
#include "mla/kernels/mla_decode_plan.h"
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

std::vector<int32_t> measure_sm_stream_weights(int num_sms, int runs, size_t bytes_per_sm,
                                               cudaStream_t stream) {
  if (num_sms < 1 || runs < 1 || bytes_per_sm < 16 || bytes_per_sm % 16 != 0)
    throw std::invalid_argument(
        "measure_sm_stream_weights: needs num_sms >= 1, runs >= 1 and bytes_per_sm a positive "
        "multiple of 16");
  const size_t words_per_cta = bytes_per_sm / sizeof(uint64_t);
  uint64_t* src = nullptr;
  uint64_t* records = nullptr;
  MLA_CUDA_CHECK(cudaMalloc(&src, bytes_per_sm * size_t(num_sms)));
  MLA_CUDA_CHECK(cudaMalloc(&records, sizeof(uint64_t) * kSmStreamRecordWords * size_t(num_sms)));
  std::vector<std::vector<double>> rates(kDecodeSmSlots);  // MB/s per run, by SM id
  std::vector<uint64_t> host(size_t(kSmStreamRecordWords) * size_t(num_sms));
  try {
    MLA_CUDA_CHECK(cudaMemsetAsync(src, 0x5a, bytes_per_sm * size_t(num_sms), stream));
    for (int run = 0; run < runs; ++run) {
      launch_sm_stream(src, words_per_cta, num_sms, records, stream);
      MLA_CUDA_CHECK(cudaMemcpyAsync(host.data(), records, host.size() * sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream));
      MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
      for (int cta = 0; cta < num_sms; ++cta) {
        const uint64_t* record = host.data() + size_t(cta) * kSmStreamRecordWords;
        const int64_t ns = int64_t(record[2] - record[1]);
        if (record[0] < uint64_t(kDecodeSmSlots) && ns > 0)
          rates[record[0]].push_back(double(bytes_per_sm) / double(ns) * 1e3);  // MB/s
      }
    }
  } catch (...) {
    cudaFree(src);
    cudaFree(records);
    throw;
  }
  MLA_CUDA_CHECK(cudaFree(src));
  MLA_CUDA_CHECK(cudaFree(records));
  std::vector<int32_t> weights(kDecodeSmSlots, 0);
  for (int sm = 0; sm < kDecodeSmSlots; ++sm) {
    std::vector<double>& r = rates[sm];
    if (r.empty()) continue;
    std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
    weights[sm] = std::max(1, static_cast<int32_t>(std::min(r[r.size() / 2], 2e9)));
  }
  return weights;
}

}  // namespace mla::kernels
