// Out-of-line part of src/cuda/check.h.
#include "cuda/check.h"

#include <cstdlib>
#include <cstring>

#include <cublas_v2.h>

#include "core/error.h"

namespace mla::cuda {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  throw Error(fmt::format("CUDA error {} ({}) at {}:{} in `{}`", cudaGetErrorName(status),
                          cudaGetErrorString(status), file, line, expr));
}

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  throw Error(fmt::format("cuBLAS error {} ({}) at {}:{} in `{}`", cublasGetStatusName(status),
                          cublasGetStatusString(status), file, line, expr));
}

bool sync_check_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("MLA_SYNC_CHECK");
    return value != nullptr && std::strcmp(value, "0") != 0 && value[0] != '\0';
  }();
  return enabled;
}

namespace {
thread_local bool thread_capturing = false;
}

void set_thread_capturing(bool capturing) {
  thread_capturing = capturing;
}

void check_launch(const char* what, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && sync_check_enabled() && !thread_capturing)
    status = cudaDeviceSynchronize();
  if (status != cudaSuccess) {
    throw Error(
        fmt::format("CUDA error {} ({}) after launching {} at {}:{}{}", cudaGetErrorName(status),
                    cudaGetErrorString(status), what, file, line,
                    sync_check_enabled()
                        ? ""
                        : " (set MLA_SYNC_CHECK=1 to pin asynchronous faults to their kernel)"));
  }
}

}  // namespace mla::cuda
