// The 64-row split-KV bodies' epilogue (the lockstep body, splitkv_wgmma.cuh, and the seesaw,
// splitkv_seesaw.cuh): row sums over the quad and both warpgroups, then the tile's rows to out/lse
// (a sequence in one piece) or to the split partials. The one subtle thing: each warpgroup holds
// half of every row's 512 output columns (kColsPerGroup each), while the row sums are per
// warpgroup and are added through `row_partial`, so the sums must already be in the frame of the
// row's final maximum (row_max_run) in both warpgroups.
#pragma once

#include <cmath>

#include "common/ptx.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

inline constexpr int kColsPerGroup = kDimV / 2;  // O columns per warpgroup

// Called by all 256 threads (it has a __syncthreads()); `row_partial` is shared memory.
template <int kRows>
__device__ __forceinline__ void write_tile_rows(
    const DecodeKernelArgs& args, const DecodePiece& piece, int kv_head, int tile_row0, int group,
    int lane, const int (&my_rows)[2], const float (&row_sum_part)[2],
    const float (&row_max_run)[2], const float (&o_acc)[128], float (&row_partial)[2][kRows]) {
  const MlaDecodeParams& p = args.params;
  const int rows_total = args.shape.rows_per_kv_head;
  const int batch_index = piece.seq;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum_part[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if ((lane & 3) == 0) row_partial[group][my_rows[h]] = sum;
  }
  __syncthreads();

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

}  // namespace mla::kernels::decode
