// Host side of mla/kernels/scatter_rows.h: validation, then the kernel (scatter_rows.cu).
#include "core/error.h"
#include "mla/kernels/scatter_rows.h"

namespace mla::kernels {

void launch_scatter_rows_kernel(const ScatterRowsParams& params, cudaStream_t stream);

void launch_scatter_rows(const ScatterRowsParams& params, cudaStream_t stream) {
  if (params.rows < 0 || params.cols < 0 || params.rows > 0x7fffffff)
    throw_error("scatter_rows: rows {} and cols {} must be in [0, 2^31)", params.rows, params.cols);
  if (params.rows == 0 || params.cols == 0) return;
  if (params.src == nullptr || params.indices == nullptr || params.dst == nullptr)
    throw_error("scatter_rows: src, indices and dst must be device pointers, got null");
  if (params.src_row_stride < params.cols || params.dst_row_stride < params.cols)
    throw_error("scatter_rows: row strides (src {}, dst {}) must be at least cols ({})",
                params.src_row_stride, params.dst_row_stride, params.cols);
  launch_scatter_rows_kernel(params, stream);
}

}  // namespace mla::kernels
