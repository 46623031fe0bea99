// The machine's measured ceilings, taken in the same run as the kernel figures they qualify.
#pragma once

#include <cuda_runtime_api.h>

namespace mla::bench {

struct Ceilings {
  double copy_gbps = 0;    // device-to-device copy, bytes read + written, median of runs
  double gemm_tflops = 0;  // cuBLAS bf16 8192³ GEMM (fp32 accumulate), median of runs
  double copy_bytes = 0;   // bytes moved per copy (read + written)
  // A one-block kernel that writes 2 bytes, timed like a decode row (L2 flushed, events around
  // it): the least any kernel costs under this method, the floor of the small-batch rows.
  double launch_floor_us = 0;
};

Ceilings measure_ceilings(cudaStream_t stream, int runs);

}  // namespace mla::bench
