// The elementwise and row-moving ops (mla/kernels/ops.h): embedding, add, silu_mul, copy,
// gather_rows, gather_latent_cache, and the counter-based random fill.
//
// Each is a grid-stride loop over flat work items (one element, or 8 on the vector path) mapped
// to (row, column) by one division; a thread reads and writes only its own elements, which is what
// makes the documented aliasing (x += x, out == gate) safe.
#include "cuda/check.h"
#include "ops/common.cuh"

namespace mla::kernels::ops {
namespace {

// Work items per row: vectors of 8 on the vector path, else single elements.
template <bool kVec>
__device__ __forceinline__ int64_t items_per_row(int64_t cols) {
  return kVec ? cols / kVecElements : cols;
}

__device__ __forceinline__ int64_t global_thread() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return int64_t(gridDim.x) * blockDim.x;
}

template <bool kVec, typename TO>
__global__ void embedding_kernel(const bf16_t* table, int64_t vocab, int64_t hidden,
                                 const int32_t* token_ids, int64_t tokens, TO* out,
                                 int64_t out_stride) {
  const int64_t per_row = items_per_row<kVec>(hidden);
  for (int64_t i = global_thread(); i < tokens * per_row; i += grid_threads()) {
    const int64_t t = i / per_row;
    const int64_t c = (i - t * per_row) * (kVec ? kVecElements : 1);
    const int64_t id = token_ids[t];
    const bool valid = id >= 0 && id < vocab;
    const bf16_t* src = table + id * hidden + c;
    TO* dst = out + t * out_stride + c;
    if constexpr (kVec) {
      float v[kVecElements];
      if (valid) {
        load_vec(src, v);
      } else {
#pragma unroll
        for (int k = 0; k < kVecElements; ++k) v[k] = 0.f;
      }
      store_vec(dst, v);
    } else {
      *dst = from_f32<TO>(valid ? to_f32(*src) : 0.f);
    }
  }
}

template <bool kVec, typename TX, typename TY>
__global__ void add_kernel(TX* x, int64_t x_stride, const TY* y, int64_t y_stride, int64_t rows,
                           int64_t cols) {
  const int64_t per_row = items_per_row<kVec>(cols);
  for (int64_t i = global_thread(); i < rows * per_row; i += grid_threads()) {
    const int64_t r = i / per_row;
    const int64_t c = (i - r * per_row) * (kVec ? kVecElements : 1);
    TX* px = x + r * x_stride + c;
    const TY* py = y + r * y_stride + c;
    if constexpr (kVec) {
      float a[kVecElements], b[kVecElements];
      load_vec(px, a);
      load_vec(py, b);
#pragma unroll
      for (int k = 0; k < kVecElements; ++k) a[k] += b[k];
      store_vec(px, a);
    } else {
      *px = from_f32<TX>(to_f32(*px) + to_f32(*py));
    }
  }
}

__device__ __forceinline__ float silu(float g) {
  return g / (1.f + expf(-g));
}

template <bool kVec, typename TG, typename TU, typename TO>
__global__ void silu_mul_kernel(const TG* gate, int64_t gate_stride, const TU* up,
                                int64_t up_stride, int64_t rows, int64_t cols, TO* out,
                                int64_t out_stride) {
  const int64_t per_row = items_per_row<kVec>(cols);
  for (int64_t i = global_thread(); i < rows * per_row; i += grid_threads()) {
    const int64_t r = i / per_row;
    const int64_t c = (i - r * per_row) * (kVec ? kVecElements : 1);
    const TG* pg = gate + r * gate_stride + c;
    const TU* pu = up + r * up_stride + c;
    TO* po = out + r * out_stride + c;
    if constexpr (kVec) {
      float g[kVecElements], u[kVecElements];
      load_vec(pg, g);
      load_vec(pu, u);
#pragma unroll
      for (int k = 0; k < kVecElements; ++k) g[k] = silu(g[k]) * u[k];
      store_vec(po, g);
    } else {
      *po = from_f32<TO>(silu(to_f32(*pg)) * to_f32(*pu));
    }
  }
}

template <bool kVec, typename TS, typename TD>
__global__ void copy_kernel(const TS* src, int64_t src_stride0, int64_t src_stride1, TD* dst,
                            int64_t dst_stride0, int64_t dst_stride1, int64_t d0, int64_t d1,
                            int64_t d2) {
  const int64_t per_row = items_per_row<kVec>(d2);
  for (int64_t i = global_thread(); i < d0 * d1 * per_row; i += grid_threads()) {
    const int64_t row = i / per_row;  // row = i0 · d1 + i1
    const int64_t c = (i - row * per_row) * (kVec ? kVecElements : 1);
    const int64_t i0 = row / d1;
    const int64_t i1 = row - i0 * d1;
    const TS* ps = src + i0 * src_stride0 + i1 * src_stride1 + c;
    TD* pd = dst + i0 * dst_stride0 + i1 * dst_stride1 + c;
    if constexpr (kVec) {
      float v[kVecElements];
      load_vec(ps, v);
      store_vec(pd, v);
    } else {
      *pd = from_f32<TD>(to_f32(*ps));
    }
  }
}

// out[i] = src[index[i]] for i < count; a negative index gives zeros.
template <bool kVec, typename TIndex, typename TS, typename TO>
__global__ void gather_kernel(const TS* src, int64_t src_stride, const TIndex* index, int64_t count,
                              int64_t cols, TO* out, int64_t out_stride) {
  const int64_t per_row = items_per_row<kVec>(cols);
  for (int64_t i = global_thread(); i < count * per_row; i += grid_threads()) {
    const int64_t r = i / per_row;
    const int64_t c = (i - r * per_row) * (kVec ? kVecElements : 1);
    const int64_t source_row = index[r];
    const bool valid = source_row >= 0;
    const TS* ps = src + source_row * src_stride + c;
    TO* po = out + r * out_stride + c;
    if constexpr (kVec) {
      float v[kVecElements];
      if (valid) {
        load_vec(ps, v);
      } else {
#pragma unroll
        for (int k = 0; k < kVecElements; ++k) v[k] = 0.f;
      }
      store_vec(po, v);
    } else {
      *po = from_f32<TO>(valid ? to_f32(*ps) : 0.f);
    }
  }
}

unsigned grid_for_items(int64_t rows, int64_t cols, bool vec) {
  return grid_for(rows * (vec ? cols / kVecElements : cols), kBlockThreads);
}

// Calls f(std::bool_constant<vec>).
template <typename F>
void dispatch_vec(bool vec, F&& f) {
  if (vec) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

}  // namespace

void launch_embedding_kernel(const bf16* table, int64_t vocab, int64_t hidden,
                             const int32_t* token_ids, int64_t tokens, const Strided2D& out,
                             bool vec, cudaStream_t stream) {
  dispatch_type(out.type, [&](auto out_tag) {
    using TO = decltype(out_tag);
    dispatch_vec(vec, [&](auto vec_path) {
      embedding_kernel<decltype(vec_path)::value, TO>
          <<<grid_for_items(tokens, hidden, vec), kBlockThreads, 0, stream>>>(
              reinterpret_cast<const bf16_t*>(table), vocab, hidden, token_ids, tokens,
              static_cast<TO*>(out.data), out.row_stride);
    });
  });
  MLA_CHECK_LAUNCH("embedding");
}

void launch_add_kernel(const Strided2D& x, const Strided2D& y, int64_t rows, int64_t cols, bool vec,
                       cudaStream_t stream) {
  dispatch_type(x.type, [&](auto x_tag) {
    dispatch_type(y.type, [&](auto y_tag) {
      using TX = decltype(x_tag);
      using TY = decltype(y_tag);
      dispatch_vec(vec, [&](auto vec_path) {
        add_kernel<decltype(vec_path)::value, TX, TY>
            <<<grid_for_items(rows, cols, vec), kBlockThreads, 0, stream>>>(
                static_cast<TX*>(x.data), x.row_stride, static_cast<const TY*>(y.data),
                y.row_stride, rows, cols);
      });
    });
  });
  MLA_CHECK_LAUNCH("add");
}

void launch_silu_mul_kernel(const Strided2D& gate, const Strided2D& up, int64_t rows, int64_t cols,
                            const Strided2D& out, bool vec, cudaStream_t stream) {
  dispatch_type(gate.type, [&](auto gate_tag) {
    dispatch_type(up.type, [&](auto up_tag) {
      dispatch_type(out.type, [&](auto out_tag) {
        using TG = decltype(gate_tag);
        using TU = decltype(up_tag);
        using TO = decltype(out_tag);
        dispatch_vec(vec, [&](auto vec_path) {
          silu_mul_kernel<decltype(vec_path)::value, TG, TU, TO>
              <<<grid_for_items(rows, cols, vec), kBlockThreads, 0, stream>>>(
                  static_cast<const TG*>(gate.data), gate.row_stride,
                  static_cast<const TU*>(up.data), up.row_stride, rows, cols,
                  static_cast<TO*>(out.data), out.row_stride);
        });
      });
    });
  });
  MLA_CHECK_LAUNCH("silu_mul");
}

void launch_copy_kernel(const Strided3D& src, const Strided3D& dst, int64_t d0, int64_t d1,
                        int64_t d2, bool vec, cudaStream_t stream) {
  dispatch_type(src.type, [&](auto src_tag) {
    dispatch_type(dst.type, [&](auto dst_tag) {
      using TS = decltype(src_tag);
      using TD = decltype(dst_tag);
      dispatch_vec(vec, [&](auto vec_path) {
        copy_kernel<decltype(vec_path)::value, TS, TD>
            <<<grid_for_items(d0 * d1, d2, vec), kBlockThreads, 0, stream>>>(
                static_cast<const TS*>(src.data), src.stride0, src.stride1,
                static_cast<TD*>(dst.data), dst.stride0, dst.stride1, d0, d1, d2);
      });
    });
  });
  MLA_CHECK_LAUNCH("copy");
}

void launch_gather_rows_kernel(const Strided2D& x, const int32_t* rows, int64_t count, int64_t cols,
                               const Strided2D& out, bool vec, cudaStream_t stream) {
  dispatch_type(x.type, [&](auto x_tag) {
    dispatch_type(out.type, [&](auto out_tag) {
      using TX = decltype(x_tag);
      using TO = decltype(out_tag);
      dispatch_vec(vec, [&](auto vec_path) {
        gather_kernel<decltype(vec_path)::value, int32_t, TX, TO>
            <<<grid_for_items(count, cols, vec), kBlockThreads, 0, stream>>>(
                static_cast<const TX*>(x.data), x.row_stride, rows, count, cols,
                static_cast<TO*>(out.data), out.row_stride);
      });
    });
  });
  MLA_CHECK_LAUNCH("gather_rows");
}

void launch_gather_latent_cache_kernel(const bf16* cache, int64_t cache_slot_stride,
                                       int64_t latent_dim, const int64_t* slots, int64_t count,
                                       const Strided2D& out, bool vec, cudaStream_t stream) {
  dispatch_type(out.type, [&](auto out_tag) {
    using TO = decltype(out_tag);
    dispatch_vec(vec, [&](auto vec_path) {
      gather_kernel<decltype(vec_path)::value, int64_t, bf16_t, TO>
          <<<grid_for_items(count, latent_dim, vec), kBlockThreads, 0, stream>>>(
              reinterpret_cast<const bf16_t*>(cache), cache_slot_stride, slots, count, latent_dim,
              static_cast<TO*>(out.data), out.row_stride);
    });
  });
  MLA_CHECK_LAUNCH("gather_latent_cache");
}

}  // namespace mla::kernels::ops
