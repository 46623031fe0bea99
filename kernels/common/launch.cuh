// Launching a kernel as a programmatic dependent of the grid before it in the stream (the MoE
// chain, kFast's combines).
//
// The kernel may start while the previous grid still runs; it must call
// ptx::wait_for_preceding_grid() before reading anything that grid writes (everything older is
// complete by then). Stream capture records the dependency, so CUDA graphs keep it.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.h"

namespace mla::kernels {

template <typename Args>
void launch_programmatic_dependent(void (*kernel)(Args), dim3 grid, dim3 block, size_t smem_bytes,
                                   cudaStream_t stream, const Args& args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  MLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

}  // namespace mla::kernels
