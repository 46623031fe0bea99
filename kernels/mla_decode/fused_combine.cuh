// kFast's combine, fused into the split-KV kernel: the last CTA of a sequence to finish merges the
// sequence's partials by log-sum-exp (no combine launch). Included by the split-KV bodies.
//
// Every CTA that wrote a partial (its sequence has ≥ 2 pieces) takes a ticket on the arrival
// counter of (sequence, kv head, row tile) in the workspace; the CTA whose ticket is the number of
// pieces − 1 arrives last, merges every piece's partial for its tile's rows into out (bf16) and
// lse, and puts the counter back to 0 for the next launch. The plan kernel zeroes the counters
// (launch_mla_decode_plan runs before each step's first layer); the layers of a step reuse the
// plan and rely on the last CTA's reset, so the workspace never needs a memset and a captured step
// replays as is.
//
// The subtle part is the memory ordering. All threads' partial stores precede thread 0's
// __threadfence() through the __syncthreads() before it (release); thread 0's atomicAdd then
// __threadfence() and the __syncthreads() after it (acquire) order every earlier arrival's stores
// before the last CTA's reads: the pattern cooperative groups' grid sync uses. The merge reads the
// partials with ld.global.cg (L2), never through this SM's L1.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

// Counter of (sequence, kv head, row tile); blockIdx.y = kv head · num_row_tiles + row tile.
__device__ __forceinline__ int* combine_counter(const DecodeKernelArgs& args, int seq) {
  return args.combine_counters +
         static_cast<int64_t>(seq) * args.params.num_heads_kv * args.shape.num_row_tiles +
         blockIdx.y;
}

// Called by every thread after this CTA's partial stores for a piece of a sequence with
// `num_splits` ≥ 2 pieces. True (in every thread) in the CTA that arrived last. `broadcast` is a
// shared-memory word nobody touches until the next __syncthreads() after this returns.
__device__ __forceinline__ bool arrive_and_check_last(int* counter, int num_splits,
                                                      int* broadcast) {
  __syncthreads();  // every thread's partial stores come before thread 0's release fence
  if (threadIdx.x == 0) {
    __threadfence();
    const int ticket = atomicAdd(counter, 1);
    const bool last = ticket == num_splits - 1;
    if (last) {
      *counter = 0;     // every piece has arrived: ready for the next launch
      __threadfence();  // acquire: the other pieces' partials before this CTA's reads
    }
    *broadcast = last ? 1 : 0;
  }
  __syncthreads();
  return *broadcast != 0;
}

// The last CTA of a sequence: merges the sequence's `num_splits` partials (global indices
// split0 …) for the rows [tile_row0, tile_row0 + kRows) of kv head `kv_head` into out and lse.
// `stats` is 2 · kRows floats of shared memory free until the next __syncthreads() of the caller.
//
// Work layout: statistics with kThreads / kRows threads per row striding over the pieces; then
// each thread owns 4 output columns (one float4) of every other row and walks two rows at a time,
// kFusedMergeUnroll pieces deep, so 2 · kFusedMergeUnroll independent 16-byte loads per thread
// are in flight (the merge is one SM reading pieces × rows × 2 KB from L2).
template <int kRows>
__device__ __forceinline__ void merge_partials(const DecodeKernelArgs& args, int seq, int split0,
                                               int num_splits, int kv_head, int tile_row0,
                                               float* stats) {
  constexpr int kThreadsPerRow = kThreads / kRows;  // 16 (16-row tiles) or 4 (64-row tiles)
  static_assert(kThreadsPerRow >= 1 && kThreadsPerRow <= 32 && 32 % kThreadsPerRow == 0);
  constexpr int kQuads = kDimV / 4;  // float4 column groups of a row
  static_assert(kThreads == 2 * kQuads, "two rows at a time, one float4 per thread");
  constexpr int kUnroll = kFusedMergeUnroll;

  const MlaDecodeParams& p = args.params;
  const int tid = threadIdx.x;
  const int rows_total = args.shape.rows_per_kv_head;
  const int valid_rows = min(kRows, rows_total - tile_row0);
  const int64_t piece_stride = static_cast<int64_t>(p.num_heads_kv) * rows_total;  // partial rows
  const int64_t row0_index = static_cast<int64_t>(split0) * piece_stride +
                             static_cast<int64_t>(kv_head) * rows_total + tile_row0;
  const float* lse_base = args.partial_lse + row0_index;  // + k · piece_stride + row

  // 1. Per row: the largest partial lse, the sum of exp(lse − max), and the final lse.
  {
    const int row = tid / kThreadsPerRow;
    const int sub = tid % kThreadsPerRow;
    const bool valid = row < valid_rows;
    float max_lse = -INFINITY;
    if (valid) {
#pragma unroll 4
      for (int k = sub; k < num_splits; k += kThreadsPerRow)
        max_lse = fmaxf(max_lse, __ldcg(lse_base + k * piece_stride + row));
    }
#pragma unroll
    for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2)
      max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
    float sum = 0.f;
    if (valid && max_lse != -INFINITY) {
#pragma unroll 4
      for (int k = sub; k < num_splits; k += kThreadsPerRow)
        sum += expf(__ldcg(lse_base + k * piece_stride + row) - max_lse);
    }
#pragma unroll
    for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (valid && sub == 0) {
      stats[row] = max_lse;
      stats[kRows + row] = sum > 0.f ? 1.f / sum : 0.f;  // sum ≥ 1 unless no key was seen
      const auto [s, head] = query_row(args, kv_head, tile_row0 + row);
      // No key seen in any piece: lse = +inf (out = 0 below), as the combine kernels write.
      p.lse[(static_cast<int64_t>(seq) * p.num_heads_q + head) * p.seqlen_q + s] =
          max_lse != -INFINITY ? max_lse + logf(sum) : INFINITY;
    }
  }
  __syncthreads();

  // 2. out[row][4q .. 4q+3] = Σ_k exp(lse_k − max) · partial_k[row][4q ..] / sum.
  const int quad = tid % kQuads;
  const int64_t out_piece_stride = piece_stride * kDimV;  // floats between pieces' partial rows
  const float* out_base = args.partial_out + row0_index * kDimV + 4 * quad;
  for (int row_a = tid / kQuads; row_a < valid_rows; row_a += 4) {
    const int rows[2] = {row_a, row_a + 2};
    bool active[2];
    float max_lse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      max_lse[h] = rows[h] < valid_rows ? stats[rows[h]] : -INFINITY;
      active[h] = max_lse[h] != -INFINITY;  // a row that saw no key stays 0
    }
    float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
    for (int k0 = 0; k0 < num_splits; k0 += kUnroll) {
      float lse[2][kUnroll];
      float4 v[2][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int k = k0 + u;
          const bool load = active[h] && k < num_splits;
          lse[h][u] = load ? __ldcg(lse_base + k * piece_stride + rows[h]) : -INFINITY;
          v[h][u] = load ? __ldcg(reinterpret_cast<const float4*>(out_base + k * out_piece_stride +
                                                                  rows[h] * kDimV))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // An empty piece of this row has lse = -inf: weight 0 (its partial is 0 too).
          const float w = active[h] ? expf(lse[h][u] - max_lse[h]) : 0.f;
          acc[h].x += w * v[h][u].x;
          acc[h].y += w * v[h][u].y;
          acc[h].z += w * v[h][u].z;
          acc[h].w += w * v[h][u].w;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (rows[h] >= valid_rows) continue;
      const float inv_sum = stats[kRows + rows[h]];
      const auto [s, head] = query_row(args, kv_head, tile_row0 + rows[h]);
      auto* out_row = reinterpret_cast<uint16_t*>(p.out) + seq * p.out_batch_stride +
                      s * p.out_seq_stride + head * p.out_head_stride + 4 * quad;
      *reinterpret_cast<uint2*>(out_row) =
          make_uint2(ptx::pack_bf16x2(acc[h].x * inv_sum, acc[h].y * inv_sum),
                     ptx::pack_bf16x2(acc[h].z * inv_sum, acc[h].w * inv_sum));
    }
  }
}

// The sequences with no key at all (num_splits = 0: no CTA has a piece of them) get out = 0 and
// lse = +inf, bit for bit what the combine kernels write. Part p takes sequences p, p + parts, …
// (candidate i is sequence p + i · parts); each warp checks 32 candidates at once (one plan load
// per lane, then a ballot) and writes the empty ones' rows of this CTA's tile.
template <int kRows>
__device__ __forceinline__ void write_empty_sequences(const DecodeKernelArgs& args,
                                                      const DecodePlanView& plan, int kv_head,
                                                      int tile_row0) {
  constexpr int kChunksPerRow = kDimV / 8;  // 16-byte stores of 8 bf16
  const MlaDecodeParams& p = args.params;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int valid_rows = min(kRows, args.shape.rows_per_kv_head - tile_row0);
  const int num_parts = static_cast<int>(gridDim.x);
  const int part = static_cast<int>(blockIdx.x);
  const int candidates = p.batch > part ? (p.batch - part + num_parts - 1) / num_parts : 0;
  for (int base = warp * 32; base < candidates; base += kWarps * 32) {
    const int i = base + lane;
    const bool empty = i < candidates && plan.num_splits(part + i * num_parts) == 0;
    for (uint32_t mask = __ballot_sync(0xffffffffu, empty); mask != 0; mask &= mask - 1) {
      const int seq = part + (base + __ffs(mask) - 1) * num_parts;
      for (int c = lane; c < valid_rows * kChunksPerRow; c += 32) {
        const int row = c / kChunksPerRow;
        const int chunk = c % kChunksPerRow;
        const auto [s, head] = query_row(args, kv_head, tile_row0 + row);
        auto* out_row = reinterpret_cast<uint16_t*>(p.out) + seq * p.out_batch_stride +
                        s * p.out_seq_stride + head * p.out_head_stride;
        *reinterpret_cast<uint4*>(out_row + chunk * 8) = make_uint4(0u, 0u, 0u, 0u);
        if (chunk == 0)
          p.lse[(static_cast<int64_t>(seq) * p.num_heads_q + head) * p.seqlen_q + s] = INFINITY;
      }
    }
  }
}

// The end of a piece in the fused kernels: arrive, and merge if this CTA arrived last.
template <int kRows>
__device__ __forceinline__ void finish_split_piece(const DecodeKernelArgs& args,
                                                   const DecodePlanView& plan,
                                                   const DecodePiece& piece, int kv_head,
                                                   int tile_row0, float* stats, int* broadcast) {
  if (!arrive_and_check_last(combine_counter(args, piece.seq), piece.num_splits, broadcast)) return;
  merge_partials<kRows>(args, piece.seq, plan.split_begin()[piece.seq], piece.num_splits, kv_head,
                        tile_row0, stats);
}

}  // namespace mla::kernels::decode
