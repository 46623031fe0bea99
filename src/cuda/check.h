// Check macros for the CUDA runtime and cuBLAS, and the after-launch check.
//
// Every CUDA and cuBLAS call goes through one of these. MLA_CHECK_LAUNCH() after a kernel launch
// reports launch errors at once; with MLA_SYNC_CHECK=1 in the environment it also synchronizes, so
// an asynchronous fault (a bad address inside a kernel) is reported at the kernel that caused it.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace mla::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line);
void check_launch(const char* what, const char* file, int line);
bool sync_check_enabled();
// Set while this thread records a CUDA graph: MLA_SYNC_CHECK must not synchronize then.
void set_thread_capturing(bool capturing);

}  // namespace mla::cuda

#define MLA_CUDA_CHECK(expr)                                                 \
  do {                                                                       \
    const cudaError_t mla_status_ = (expr);                                  \
    if (mla_status_ != cudaSuccess)                                          \
      ::mla::cuda::throw_cuda_error(mla_status_, #expr, __FILE__, __LINE__); \
  } while (0)

#define MLA_CUBLAS_CHECK(expr)                                                 \
  do {                                                                         \
    const cublasStatus_t mla_status_ = (expr);                                 \
    if (mla_status_ != CUBLAS_STATUS_SUCCESS)                                  \
      ::mla::cuda::throw_cublas_error(mla_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: `kernel<<<...>>>(...); MLA_CHECK_LAUNCH("mla_decode_splitkv");`
#define MLA_CHECK_LAUNCH(what) ::mla::cuda::check_launch(what, __FILE__, __LINE__)
