// Device side of mla/kernels/timestamp.h.
#include "common/ptx.cuh"
#include "cuda/check.h"
#include "mla/kernels/timestamp.h"

namespace mla::kernels {
namespace {

__global__ void timestamp_kernel(uint64_t* out) {
  *out = ptx::global_timer_ns();
}

}  // namespace

void launch_timestamp(uint64_t* out, cudaStream_t stream) {
  timestamp_kernel<<<1, 1, 0, stream>>>(out);
  MLA_CHECK_LAUNCH("timestamp");
}

}  // namespace mla::kernels
