// A one-thread kernel that writes the GPU's %globaltimer (ns) when the stream reaches it: the
// bracket around an op whose kernels stamp their own phases (mla bench decode --timeline).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mla::kernels {

void launch_timestamp(uint64_t* out, cudaStream_t stream);

}  // namespace mla::kernels
