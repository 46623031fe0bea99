// cp.async copies of query tiles (up to 64 rows × 576 bf16 columns) into shared memory, swizzled
// for the decode kernels (cache pages come by TMA: page_tma.cuh).
//
// Thread t copies row t / 4, 16-byte chunks (t % 4) + 4k for k = 0..17: a warp reads 8 rows × 64
// contiguous bytes per instruction (two full sectors each), and because the swizzle only XORs the
// low three chunk bits with (row & 7), every destination is one of two per-thread base offsets
// plus a compile-time offset, so each copy is a single cp.async with immediate offsets. Rows that
// are not valid (past the last query row of a kv head) are zero-filled and never read.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

inline constexpr int kLoaderThreadsPerRow = 4;
inline constexpr int kLoaderChunksPerThread = kChunksQK / kLoaderThreadsPerRow;  // 18
static_assert(kThreads == kPageTokens * kLoaderThreadsPerRow, "one row per 4 threads");

// kBlockStrideBytes: bytes between consecutive groups of 8 chunks of a row: 128 for row-major
// rows of 1152 bytes (the mma.sync kernel), 64 rows · 128 B for 64-column blocks (wgmma).
template <int kRowStrideBytes, int kBlockStrideBytes>
struct TileLoader {
  int row = 0;
  int first_chunk = 0;
  uint32_t offset_even = 0;  // destination of chunk first_chunk + 8j (relative to the tile)
  uint32_t offset_odd = 0;   // destination of chunk first_chunk + 4 + 8j

  __device__ __forceinline__ explicit TileLoader(int tid) {
    row = tid / kLoaderThreadsPerRow;
    first_chunk = tid % kLoaderThreadsPerRow;
    const int swizzled = first_chunk ^ (row & 7);
    offset_even = row * kRowStrideBytes + (swizzled << 4);
    offset_odd = row * kRowStrideBytes + ((swizzled ^ 4) << 4);
  }

  // Copies this thread's 18 chunks of `src_row` (the row's first element) into the tile at
  // `tile_smem`; with `valid` false the chunks are zero-filled and `fallback` (any valid pointer)
  // stands in for the source.
  __device__ __forceinline__ void copy_row(uint32_t tile_smem, const uint16_t* src_row, bool valid,
                                           const uint16_t* fallback) const {
    const uint16_t* src = (valid ? src_row : fallback) + first_chunk * kChunkElems;
    const int bytes = valid ? 16 : 0;
#pragma unroll
    for (int k = 0; k < kLoaderChunksPerThread; ++k) {
      const uint32_t dst =
          tile_smem + (k / 2) * kBlockStrideBytes + (k % 2 ? offset_odd : offset_even);
      ptx::cp_async_16(dst, src + (valid ? k * kLoaderThreadsPerRow * kChunkElems : 0), bytes);
    }
  }

  // This thread's row of the query tile whose first row is kv-head row `tile_row0`.
  __device__ __forceinline__ void copy_query_row(uint32_t q_smem, const DecodeKernelArgs& args,
                                                 int batch_index, int kv_head,
                                                 int tile_row0) const {
    const MlaDecodeParams& p = args.params;
    const int r = tile_row0 + row;
    const QueryRow query = query_row(args, kv_head, r);
    const auto* q = reinterpret_cast<const uint16_t*>(p.q);
    copy_row(q_smem,
             q + batch_index * p.q_batch_stride + query.s * p.q_seq_stride +
                 query.head * p.q_head_stride,
             r < args.shape.rows_per_kv_head, q);
  }
};

}  // namespace mla::kernels::decode
