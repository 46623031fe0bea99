// Merging split-KV partials by log-sum-exp on the device: the team merge shared by kFast's
// split-parallel combine kernel and its fused combine, and the fused combine itself.
//
// Fused combine: every CTA that wrote a partial of a split sequence arrives on the sequence's
// counter (sequence, kv head, row tile) in the workspace, waits until all of the sequence's pieces
// have arrived, then merges its own share of the output columns: the sequence's n pieces split its
// 64 groups of 8 columns n ways (piece i takes groups i, i + n, ...). No CTA merges alone and no
// combine kernel is launched. Waiting needs every CTA of the grid resident at once: the grid is at
// most num_sms CTAs of one per SM, and launch_mla_decode() only fuses when num_sms is at most the
// device's SM count. Waits only ever go to pieces of the same sequence, and a part reaches a
// sequence's piece after finishing the pieces of earlier sequences, so no cycle can form.
//
// Counters never go back to 0 inside a step: each launch adds exactly n to a sequence's counter
// (the plan kernel zeroes them per step), so a CTA whose ticket is t waits for
// (t / n + 1) · n arrivals. Memory ordering: all threads' partial stores precede thread 0's
// __threadfence() through the __syncthreads() before it (release); thread 0's acquire loads and
// the __threadfence() and __syncthreads() after them order the other pieces' stores before this
// CTA's reads, which go through L2 (ld.global.cg), never this SM's L1.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

inline constexpr int kMergeColumns = 8;                     // output columns per merged item
inline constexpr int kMergeGroups = kDimV / kMergeColumns;  // 64 groups of 8 columns per row

// One query row × kMergeColumns output columns merged over a sequence's pieces.
struct MergedColumns {
  float acc[kMergeColumns];  // Σ_k exp(lse_k − max) · partial_k[columns]
  float sum;                 // Σ_k exp(lse_k − max)
  float max;                 // max_k lse_k; -inf when no piece saw a key
};

// A team of `team` consecutive lanes (a power of two ≤ 32, aligned) merges one row's columns:
// piece k's lse is lse0[k · lse_stride], its columns out0[k · out_stride + 0..7] (32-byte
// aligned). Lanes stride over the pieces in rounds of team · kSplitsPerLane; every load of a round
// is issued before any is used, and the running maximum (shared by the team) rescales what earlier
// rounds summed. Every lane of the warp must call it with the same num_splits and team (the
// shuffles span the warp); inactive lanes load nothing.
template <int kSplitsPerLane>
__device__ __forceinline__ MergedColumns merge_columns(const float* lse0, int64_t lse_stride,
                                                       const float* out0, int64_t out_stride,
                                                       int num_splits, bool active, int team,
                                                       int team_lane) {
  MergedColumns m;
#pragma unroll
  for (int c = 0; c < kMergeColumns; ++c) m.acc[c] = 0.f;
  m.sum = 0.f;
  m.max = -INFINITY;
  for (int base = 0; base < num_splits; base += team * kSplitsPerLane) {
    float lse[kSplitsPerLane];
    float4 lo[kSplitsPerLane], hi[kSplitsPerLane];
#pragma unroll
    for (int i = 0; i < kSplitsPerLane; ++i) {
      const int k = base + team_lane + team * i;
      lse[i] = -INFINITY;
      if (active && k < num_splits) {
        const float4* partial = reinterpret_cast<const float4*>(out0 + k * out_stride);
        lse[i] = __ldcg(lse0 + k * lse_stride);
        lo[i] = __ldcg(partial);
        hi[i] = __ldcg(partial + 1);
      }
    }
    float round_max = lse[0];
#pragma unroll
    for (int i = 1; i < kSplitsPerLane; ++i) round_max = fmaxf(round_max, lse[i]);
    for (int offset = team / 2; offset > 0; offset /= 2)
      round_max = fmaxf(round_max, __shfl_xor_sync(0xffffffffu, round_max, offset));
    const float new_max = fmaxf(m.max, round_max);
    if (new_max == -INFINITY) continue;           // nothing seen yet (the same across the team)
    const float rescale = expf(m.max - new_max);  // 0 while m.max is -inf
    m.sum *= rescale;
#pragma unroll
    for (int c = 0; c < kMergeColumns; ++c) m.acc[c] *= rescale;
    m.max = new_max;
#pragma unroll
    for (int i = 0; i < kSplitsPerLane; ++i) {
      const float weight = expf(lse[i] - m.max);
      if (weight == 0.f) continue;  // an empty piece (or none): its partial may be unwritten
      m.sum += weight;
      m.acc[0] += weight * lo[i].x;
      m.acc[1] += weight * lo[i].y;
      m.acc[2] += weight * lo[i].z;
      m.acc[3] += weight * lo[i].w;
      m.acc[4] += weight * hi[i].x;
      m.acc[5] += weight * hi[i].y;
      m.acc[6] += weight * hi[i].z;
      m.acc[7] += weight * hi[i].w;
    }
  }
  for (int offset = team / 2; offset > 0; offset /= 2) {
    m.sum += __shfl_xor_sync(0xffffffffu, m.sum, offset);
#pragma unroll
    for (int c = 0; c < kMergeColumns; ++c)
      m.acc[c] += __shfl_xor_sync(0xffffffffu, m.acc[c], offset);
  }
  return m;
}

// Writes a merged item: out[seq, s, head, column0 .. +8) in bf16 and, for column 0, its lse
// (natural log; +inf and out = 0 when no piece saw a key).
__device__ __forceinline__ void write_merged_columns(const DecodeKernelArgs& args, int seq,
                                                     int kv_head, int r, int column0,
                                                     const MergedColumns& m) {
  const MlaDecodeParams& p = args.params;
  const auto [s, head] = query_row(args, kv_head, r);
  const float inv_sum = m.sum > 0.f ? 1.f / m.sum : 0.f;
  uint32_t packed[kMergeColumns / 2];
#pragma unroll
  for (int c = 0; c < kMergeColumns / 2; ++c)
    packed[c] = ptx::pack_bf16x2(m.acc[2 * c] * inv_sum, m.acc[2 * c + 1] * inv_sum);
  auto* out_row = reinterpret_cast<uint16_t*>(p.out) + seq * p.out_batch_stride +
                  s * p.out_seq_stride + head * p.out_head_stride + column0;
  *reinterpret_cast<uint4*>(out_row) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  if (column0 == 0) {
    p.lse[(static_cast<int64_t>(seq) * p.num_heads_q + head) * p.seqlen_q + s] =
        m.sum > 0.f ? m.max + logf(m.sum) : INFINITY;
  }
}

// Counter of (sequence, kv head, row tile); blockIdx.y = kv head · num_row_tiles + row tile.
__device__ __forceinline__ int* combine_counter(const DecodeKernelArgs& args, int seq) {
  return args.combine_counters +
         static_cast<int64_t>(seq) * args.params.num_heads_kv * args.shape.num_row_tiles +
         blockIdx.y;
}

// Called by every thread after this CTA's partial stores for a piece of a sequence with
// `num_splits` ≥ 2 pieces; returns once every piece of the sequence has stored its partial.
__device__ __forceinline__ void arrive_and_wait_for_pieces(int* counter, int num_splits) {
  __syncthreads();  // every thread's partial stores come before thread 0's release fence
  if (threadIdx.x == 0) {
    __threadfence();
    const int ticket = atomicAdd(counter, 1);
    const int target = (ticket / num_splits + 1) * num_splits;
    while (ptx::load_acquire_gpu(counter) < target) __nanosleep(32);
    __threadfence();  // acquire: the other pieces' partials before this CTA's reads
  }
  __syncthreads();
}

// This CTA's share of a sequence's merge: column groups slice, slice + n, ... (n = num_splits) of
// the rows [tile_row0, tile_row0 + kRows) of kv head `kv_head`. Items (row, group) are spread
// over teams of lanes as wide as the item count allows, each team striding over the pieces.
template <int kRows>
__device__ __forceinline__ void merge_share(const DecodeKernelArgs& args, int seq, int split0,
                                            int num_splits, int slice, int kv_head, int tile_row0) {
  if (slice >= kMergeGroups) return;  // more pieces than groups: this one has no share
  const int rows_total = args.shape.rows_per_kv_head;
  const int valid_rows = min(kRows, rows_total - tile_row0);
  const int groups = (kMergeGroups - 1 - slice) / num_splits + 1;
  const int items = valid_rows * groups;
  int team = 32;
  while (team > 1 && team * items > kThreads) team /= 2;
  const int teams = kThreads / team;
  const int tid = threadIdx.x;
  const int team_lane = tid % team;
  const int64_t piece_stride = static_cast<int64_t>(args.params.num_heads_kv) * rows_total;
#pragma unroll 1
  for (int item0 = 0; item0 < items; item0 += teams) {  // the same trip count in every thread
    const int item = item0 + tid / team;
    const bool active = item < items;
    const int row = active ? item % valid_rows : 0;
    const int column0 = (slice + (active ? item / valid_rows : 0) * num_splits) * kMergeColumns;
    const int64_t row0 = static_cast<int64_t>(split0) * piece_stride +
                         static_cast<int64_t>(kv_head) * rows_total + tile_row0 + row;
    const MergedColumns m = merge_columns<kFusedMergeSplitsPerLane>(
        args.partial_lse + row0, piece_stride, args.partial_out + row0 * kDimV + column0,
        piece_stride * kDimV, num_splits, active, team, team_lane);
    if (active && team_lane == 0)
      write_merged_columns(args, seq, kv_head, tile_row0 + row, column0, m);
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

// The end of a split piece in the fused kernels: arrive, wait for the sequence's other pieces,
// merge this CTA's share of its columns.
template <int kRows>
__device__ __forceinline__ void finish_split_piece(const DecodeKernelArgs& args,
                                                   const DecodePlanView& plan,
                                                   const DecodePiece& piece, int kv_head,
                                                   int tile_row0) {
  arrive_and_wait_for_pieces(combine_counter(args, piece.seq), piece.num_splits);
  const int split0 = plan.split_begin()[piece.seq];
  merge_share<kRows>(args, piece.seq, split0, piece.num_splits, piece.split_index - split0, kv_head,
                     tile_row0);
}

}  // namespace mla::kernels::decode
