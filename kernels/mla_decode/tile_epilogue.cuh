// The 64-row split-KV bodies' epilogue (the lockstep body, splitkv_wgmma.cuh, and the seesaw,
// splitkv_seesaw.cuh): row sums over the quad and both warpgroups, then the tile's rows to out/lse
// (a sequence in one piece) or to the split partials: straight from the accumulators
// (write_tile_rows), or staged in shared memory and copied out a row at a time by the TMA engine
// (write_tile_rows_staged: the seesaw's pairs order, whose CTAs run long pieces; 4-byte stores
// from the accumulator layout took ~5.5 µs a piece there, on the H200). The one subtle thing: each
// warpgroup holds half of every row's 512 output columns (kColsPerGroup each), while the row sums
// are per warpgroup and are added through `row_partial`, so the sums must already be in the frame
// of the row's final maximum (row_max_run) in both warpgroups.
#pragma once

#include <cmath>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

inline constexpr int kColsPerGroup = kDimV / 2;  // O columns per warpgroup

// Each row's sum of this warpgroup's part over the quad into `row_partial` (shared memory), then
// a __syncthreads(): called by all 256 threads.
template <int kRows>
__device__ __forceinline__ void share_row_sums(int group, int lane, const int (&my_rows)[2],
                                               const float (&row_sum_part)[2],
                                               float (&row_partial)[2][kRows]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum_part[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if ((lane & 3) == 0) row_partial[group][my_rows[h]] = sum;
  }
  __syncthreads();
}

// Row r's log-sum-exp (natural log) to lse or the partials' lse: one thread per row; (s, head) is
// query_row(args, kv_head, r).
__device__ __forceinline__ void write_row_lse(const DecodeKernelArgs& args,
                                              const DecodePiece& piece, int kv_head, int r, int s,
                                              int head, float row_max, float sum) {
  const MlaDecodeParams& p = args.params;
  const bool final_output = piece.num_splits == 1;
  const float lse =
      sum > 0.f ? (row_max + log2f(sum)) * kLn2 : (final_output ? INFINITY : -INFINITY);
  if (final_output) {
    p.lse[(static_cast<int64_t>(piece.seq) * p.num_heads_q + head) * p.seqlen_q + s] = lse;
  } else {
    args.partial_lse[(static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) *
                         args.shape.rows_per_kv_head +
                     r] = lse;
  }
}

// Called by all 256 threads (it has a __syncthreads()); `row_partial` is shared memory.
template <int kRows>
__device__ __forceinline__ void write_tile_rows(
    const DecodeKernelArgs& args, const DecodePiece& piece, int kv_head, int tile_row0, int group,
    int lane, const int (&my_rows)[2], const float (&row_sum_part)[2],
    const float (&row_max_run)[2], const float (&o_acc)[128], float (&row_partial)[2][kRows]) {
  const MlaDecodeParams& p = args.params;
  const int rows_total = args.shape.rows_per_kv_head;
  const int batch_index = piece.seq;
  share_row_sums(group, lane, my_rows, row_sum_part, row_partial);

  const bool final_output = piece.num_splits == 1;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = my_rows[h];
    const int r = tile_row0 + row;
    if (r >= rows_total) continue;
    const float sum = row_partial[0][row] + row_partial[1][row];
    const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
    const auto [s, head] = query_row(args, kv_head, r);
    const int col0 = group * kColsPerGroup + 2 * (lane & 3);
    if (final_output) {
      auto* out_row = reinterpret_cast<uint16_t*>(p.out) + batch_index * p.out_batch_stride +
                      s * p.out_seq_stride + head * p.out_head_stride;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        *reinterpret_cast<uint32_t*>(out_row + col0 + 8 * i) =
            ptx::pack_bf16x2(o_acc[4 * i + 2 * h] * inv_sum, o_acc[4 * i + 2 * h + 1] * inv_sum);
      }
    } else {
      const int64_t partial_row =
          (static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) * rows_total + r;
      float* out_row = args.partial_out + partial_row * kDimV;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        *reinterpret_cast<float2*>(out_row + col0 + 8 * i) =
            make_float2(o_acc[4 * i + 2 * h] * inv_sum, o_acc[4 * i + 2 * h + 1] * inv_sum);
      }
    }
    // The same as write_row_lse(), written out: calling it changes the SASS of every body that
    // uses this epilogue (kBaseline's lockstep body included), which were measured as they are.
    if (group == 0 && (lane & 3) == 0) {
      const float lse =
          sum > 0.f ? (row_max_run[h] + log2f(sum)) * kLn2 : (final_output ? INFINITY : -INFINITY);
      if (final_output) {
        p.lse[(static_cast<int64_t>(batch_index) * p.num_heads_q + head) * p.seqlen_q + s] = lse;
      } else {
        args.partial_lse[(static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) *
                             rows_total +
                         r] = lse;
      }
    }
  }
}

// Shared-memory row strides of write_tile_rows_staged(): 512 bf16 (final outputs) or fp32
// (partials) and 16 or 32 bytes of padding, so that a warp's accumulator stores (8 rows × 4
// threads) hit 32 different banks.
inline constexpr int kStagedOutRowBytes = kDimV * 2 + 16;
inline constexpr int kStagedPartialRowBytes = kDimV * 4 + 32;

// write_tile_rows() through shared memory: the tile's rows (scaled by 1 / sum) into `staging`
// (16-byte aligned, kRows · kStagedPartialRowBytes bytes that nothing else uses until the copies
// have read them), then threads 0..kRows-1 copy one row each to out or the partials with the TMA
// engine. Called by all threads (two __syncthreads()). Before `staging` is written again, those
// threads call tma::bulk_wait_read_all() and then the CTA synchronizes; before the CTA exits,
// tma::bulk_wait_all().
template <int kRows>
__device__ __forceinline__ void write_tile_rows_staged(
    const DecodeKernelArgs& args, const DecodePiece& piece, int kv_head, int tile_row0, int group,
    int lane, const int (&my_rows)[2], const float (&row_sum_part)[2],
    const float (&row_max_run)[2], const float (&o_acc)[128], float (&row_partial)[2][kRows],
    uint8_t* staging) {
  const MlaDecodeParams& p = args.params;
  const int rows_total = args.shape.rows_per_kv_head;
  share_row_sums(group, lane, my_rows, row_sum_part, row_partial);

  const bool final_output = piece.num_splits == 1;
  const int col0 = group * kColsPerGroup + 2 * (lane & 3);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = my_rows[h];
    const float sum = row_partial[0][row] + row_partial[1][row];
    const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
    if (final_output) {
      uint8_t* dst = staging + row * kStagedOutRowBytes + col0 * 2;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        *reinterpret_cast<uint32_t*>(dst + 16 * i) =
            ptx::pack_bf16x2(o_acc[4 * i + 2 * h] * inv_sum, o_acc[4 * i + 2 * h + 1] * inv_sum);
      }
    } else {
      uint8_t* dst = staging + row * kStagedPartialRowBytes + col0 * 4;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        *reinterpret_cast<float2*>(dst + 32 * i) =
            make_float2(o_acc[4 * i + 2 * h] * inv_sum, o_acc[4 * i + 2 * h + 1] * inv_sum);
      }
    }
    const int r = tile_row0 + row;
    if (r < rows_total && group == 0 && (lane & 3) == 0) {
      const auto [s, head] = query_row(args, kv_head, r);
      write_row_lse(args, piece, kv_head, r, s, head, row_max_run[h], sum);
    }
  }
  wgmma::fence_proxy_async_shared();  // the rows, before the TMA engine reads them
  __syncthreads();

  const int row = threadIdx.x;
  const int r = tile_row0 + row;
  if (row < kRows && r < rows_total) {
    const uint32_t src = ptx::smem_address(staging);
    if (final_output) {
      const auto [s, head] = query_row(args, kv_head, r);
      auto* out_row = reinterpret_cast<uint16_t*>(p.out) + piece.seq * p.out_batch_stride +
                      s * p.out_seq_stride + head * p.out_head_stride;
      tma::bulk_store(out_row, src + row * kStagedOutRowBytes, kDimV * 2);
    } else {
      const int64_t partial_row =
          (static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) * rows_total + r;
      tma::bulk_store(args.partial_out + partial_row * kDimV, src + row * kStagedPartialRowBytes,
                      kDimV * 4);
    }
    tma::bulk_commit();
  }
}

}  // namespace mla::kernels::decode
