// MLA_HOST_DEVICE: marks the small pure functions that the CUDA kernels and the host share.
//
// Plain C++ compilers see `inline`; nvcc sees `__host__ __device__ __forceinline__`. Planning logic
// written this way runs in a kernel and in a CPU test from one source.
#pragma once

#if defined(__CUDACC__)
#define MLA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MLA_HOST_DEVICE inline
#endif
