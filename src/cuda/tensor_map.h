// TMA tensor maps (CUtensorMap) for bf16 tensors, built on the host for the bulk tensor copies of
// the Hopper kernels. The driver's encoder is reached through cudaGetDriverEntryPointByVersion,
// so nothing links libcuda directly.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mla::cuda {

struct TensorMapBf16Spec {
  const void* base = nullptr;      // 16-byte aligned
  int rank = 0;                    // 1..5
  uint64_t dims[5] = {};           // elements per dimension, innermost (contiguous) first
  uint64_t strides_bytes[4] = {};  // byte stride of dims 1..rank-1 (multiples of 16)
  uint32_t box[5] = {};  // box extent per dimension (box[0] · 2 bytes ≤ 128 with swizzle)
  bool swizzle_128b = true;
};

// Throws mla::Error naming the failing argument when the driver rejects the description.
CUtensorMap make_tensor_map_bf16(const TensorMapBf16Spec& spec);

}  // namespace mla::cuda
