// measure_ceilings(): a large device-to-device copy and a cuBLAS bf16 GEMM on random data, and
// the event-timed cost of a one-block kernel after the L2 flush.
#include "bench/ceilings.h"

#include <cublas_v2.h>

#include "bench/timing.h"
#include "cuda/device.h"
#include "mla/kernels/fill.h"

namespace mla::bench {

Ceilings measure_ceilings(cudaStream_t stream, int runs) {
  Ceilings ceilings;
  EventTimer timer(stream);
  {
    const size_t bytes = size_t(2) << 30;  // 2 GiB each way: far beyond the 60 MB L2
    cuda::DeviceBuffer<uint8_t> src(bytes), dst(bytes);
    MLA_CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, bytes, stream));
    const double us = timer.median_us(
        [&] {
          MLA_CUDA_CHECK(
              cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
        },
        runs, 2, false);
    ceilings.copy_bytes = 2.0 * bytes;
    ceilings.copy_gbps = ceilings.copy_bytes / us * 1e-3;
  }
  {
    constexpr int n = 8192;
    cuda::DeviceBuffer<bf16> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
    kernels::launch_fill_random_bf16(a.data(), a.size(), {11, 1.f, 4.f}, stream);
    kernels::launch_fill_random_bf16(b.data(), b.size(), {12, 1.f, 4.f}, stream);
    cublasHandle_t handle;
    MLA_CUBLAS_CHECK(cublasCreate(&handle));
    MLA_CUBLAS_CHECK(cublasSetStream(handle, stream));
    const float alpha = 1.f, beta = 0.f;
    const double us = timer.median_us(
        [&] {
          MLA_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(),
                                        CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n, &beta, c.data(),
                                        CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        },
        runs, 3, false);
    MLA_CUBLAS_CHECK(cublasDestroy(handle));
    ceilings.gemm_tflops = 2.0 * n * n * double(n) / us * 1e-6;
  }
  {
    cuda::DeviceBuffer<bf16> one(1);
    ceilings.launch_floor_us = timer.median_us(
        [&] {
          kernels::launch_fill_random_bf16(one.data(), 1, {13, 1.f, 1.f}, stream);
        },
        runs, 2,
        /*flush_l2=*/true);
  }
  return ceilings;
}

}  // namespace mla::bench
