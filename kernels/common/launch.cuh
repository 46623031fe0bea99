// Launching a kernel as a programmatic dependent of the grid before it in the stream (the MoE
// chain, kFast's combines), or cooperatively (kFast's fused combine, whose CTAs wait for each
// other: the launch fails instead of hanging when the grid cannot be resident all at once).
//
// The kernel may start while the previous grid still runs; it must call
// ptx::wait_for_preceding_grid() before reading anything that grid writes (everything older is
// complete by then). Stream capture records the dependency, so CUDA graphs keep it.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.h"

namespace mla::kernels {

// cudaLaunchKernelEx with one launch attribute.
template <typename Args>
void launch_with_attribute(void (*kernel)(Args), dim3 grid, dim3 block, size_t smem_bytes,
                           cudaStream_t stream, const Args& args, cudaLaunchAttribute attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  MLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

template <typename Args>
void launch_programmatic_dependent(void (*kernel)(Args), dim3 grid, dim3 block, size_t smem_bytes,
                                   cudaStream_t stream, const Args& args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  launch_with_attribute(kernel, grid, block, smem_bytes, stream, args, attribute);
}

// A cooperative launch: every CTA of the grid is resident at once, or the launch fails
// (cudaErrorCooperativeLaunchTooLarge, e.g. under an MPS share or a green context smaller than
// the grid). The kernel does not need grid.sync(); it relies on co-residency alone.
template <typename Args>
void launch_cooperative(void (*kernel)(Args), dim3 grid, dim3 block, size_t smem_bytes,
                        cudaStream_t stream, const Args& args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  launch_with_attribute(kernel, grid, block, smem_bytes, stream, args, attribute);
}

// kFast's split-KV kernels: cooperative with the fused combine (its CTAs wait for each other),
// a plain launch otherwise.
template <typename Args>
void launch_cooperative_if(bool cooperative, void (*kernel)(Args), dim3 grid, dim3 block,
                           size_t smem_bytes, cudaStream_t stream, const Args& args) {
  if (cooperative) {
    launch_cooperative(kernel, grid, block, smem_bytes, stream, args);
  } else {
    kernel<<<grid, block, smem_bytes, stream>>>(args);
  }
}

}  // namespace mla::kernels
