// Scattering rows into a bf16 table at given row indices (the latent cache write without the fused
// norm and RoPE: Backend::write_latent_cache). A negative index skips the row (a padding token).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtypes.h"
#include "mla/kernels/scalar_type.h"

namespace mla::kernels {

struct ScatterRowsParams {
  const void* src = nullptr;  // [rows, cols] src_type, row stride src_row_stride
  ScalarType src_type = ScalarType::kF32;
  int64_t src_row_stride = 0;
  const int64_t* indices = nullptr;  // [rows] int64 device: destination row, or < 0 to skip
  int64_t rows = 0;
  int64_t cols = 0;
  bf16* dst = nullptr;  // [num_dst_rows, cols] bf16, row stride dst_row_stride
  int64_t dst_row_stride = 0;
  int64_t num_dst_rows = 0;  // indices >= this are a caller bug (checked on the device)
};

void launch_scatter_rows(const ScatterRowsParams& params, cudaStream_t stream);

}  // namespace mla::kernels
