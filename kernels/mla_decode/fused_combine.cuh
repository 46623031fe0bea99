// kFast's fused combine: merging split-KV partials by log-sum-exp inside the split-KV kernel.
//
// Fused combine: every CTA that wrote a partial of a split sequence arrives on the sequence's
// counter (sequence, kv head, row tile) in the workspace as soon as it has; after its part's last
// piece it waits until all of the sequence's pieces have arrived, then merges its own share of the
// output columns: the sequence's n pieces split its 64 groups of 8 columns n ways (piece i takes
// groups i, i + n, ...), staged into the free page stages. No CTA merges alone and no combine
// kernel is launched. Waiting needs every CTA of the grid resident at once: the grid is at most
// one CTA per SM, and launch_mla_decode() only fuses when it fits the device's SM count. A CTA
// waits only after computing all of its pieces, so every wait ends once the other CTAs have
// computed theirs: no chains, no cycles.
//
// Counters never go back to 0 inside a step: each launch adds exactly n to a sequence's counter
// (the plan kernel zeroes them per step), so a CTA whose ticket is t waits for
// (t / n + 1) · n arrivals. Memory ordering, with no SC fence (the seventeenth session found a
// __threadfence(), MEMBAR.SC.GPU, in this chain; docs/kernels/mla_decode.md): all threads'
// partial stores precede thread 0's arrival through the __syncthreads() before it, and the
// arrival is an acquire-release add (a cumulative release). The CTA whose add completes the count
// has acquired every earlier release through it and does not wait; the others wait with acquire
// loads. The __syncthreads() after thread 0's acquire orders the other pieces' stores before this
// CTA's reads, which go through L2 (ld.global.cg, cp.async.cg), never this SM's L1.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

inline constexpr int kMergeColumns = 8;                     // output columns per merged item
inline constexpr int kMergeGroups = kDimV / kMergeColumns;  // 64 groups of 8 columns per row
// merge_share's scratch must hold at least one piece of a 64-row tile's whole share (its chunk of
// pieces is never 0); the bodies static_assert their page stages against it.
inline constexpr int kMergeShareMinScratchFloats = 4 + 64 * (1 + kMergeGroups * kMergeColumns);

// One query row × kMergeColumns output columns merged over a sequence's pieces, online: pieces
// are added under a running maximum that only rises.
struct MergedColumns {
  float acc[kMergeColumns];  // Σ_k exp(lse_k − max) · partial_k[columns]
  float sum;                 // Σ_k exp(lse_k − max)
  float max;                 // max_k lse_k; -inf when no piece saw a key

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int c = 0; c < kMergeColumns; ++c) acc[c] = 0.f;
    sum = 0.f;
    max = -INFINITY;
  }
  // Raises the running maximum to new_max (finite, ≥ max), rescaling what was summed.
  __device__ __forceinline__ void raise_max(float new_max) {
    const float rescale = expf(max - new_max);  // 0 while max is -inf
    sum *= rescale;
#pragma unroll
    for (int c = 0; c < kMergeColumns; ++c) acc[c] *= rescale;
    max = new_max;
  }
  // Adds a piece with log-sum-exp `lse` and columns (lo, hi). An empty piece (lse = -inf) adds
  // nothing and its columns are never read (they may be unwritten).
  __device__ __forceinline__ void add(float lse, const float4& lo, const float4& hi) {
    const float weight = expf(lse - max);
    if (weight == 0.f) return;
    sum += weight;
    acc[0] += weight * lo.x;
    acc[1] += weight * lo.y;
    acc[2] += weight * lo.z;
    acc[3] += weight * lo.w;
    acc[4] += weight * hi.x;
    acc[5] += weight * hi.y;
    acc[6] += weight * hi.z;
    acc[7] += weight * hi.w;
  }
  // Sums the team's lanes (a power of two ≤ 32, aligned); every lane of the warp calls it.
  __device__ __forceinline__ void reduce_over_team(int team) {
    for (int offset = team / 2; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
#pragma unroll
      for (int c = 0; c < kMergeColumns; ++c)
        acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], offset);
    }
  }
};

// The largest of `value` over a team of lanes (see MergedColumns::reduce_over_team).
__device__ __forceinline__ float max_over_team(float value, int team) {
  for (int offset = team / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
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

// After this CTA's partial stores for a piece of a sequence with ≥ 2 pieces (every thread calls
// it): thread 0 arrives on the sequence's counter and records the piece in `pending` (shared
// memory; read after the next __syncthreads()). The wait and the merge come after the part's last
// piece (merge_pending_pieces), so no CTA waits while it still has pages to read.
__device__ __forceinline__ void arrive_for_piece(const DecodeKernelArgs& args,
                                                 const DecodePiece& piece, PendingMerges& pending) {
  __syncthreads();  // every thread's partial stores come before thread 0's release
  if (threadIdx.x == 0) {
    const int ticket = ptx::atomic_add_acq_rel_gpu(combine_counter(args, piece.seq), 1);
    const int i = pending.count;
    if (i >= 2) __trap();  // a part's split pieces are its first and its last: never three
    const int target = (ticket / piece.num_splits + 1) * piece.num_splits;
    pending.seq[i] = piece.seq;
    pending.split_index[i] = piece.split_index;
    pending.num_splits[i] = piece.num_splits;
    pending.target[i] = ticket + 1 == target ? 0 : target;
    pending.count = i + 1;
  }
}

// This CTA's share of a sequence's merge: column groups slice, slice + n, ... (n = num_splits) of
// the rows [tile_row0, tile_row0 + kRows) of kv head `kv_head`. The share's partials and lse are
// staged into `scratch` (shared memory, `scratch_floats` floats, 16-byte aligned, free) with
// cp.async through L2, in chunks of pieces if they do not fit at once; then items (row, group) are
// spread over teams of lanes as wide as the item count allows, each team striding over the pieces
// with a running maximum.
template <int kRows>
__device__ __forceinline__ void merge_share(const DecodeKernelArgs& args, int seq, int split0,
                                            int num_splits, int slice, int kv_head, int tile_row0,
                                            float* scratch, int scratch_floats) {
  if (slice >= kMergeGroups) return;  // more pieces than groups: this one has no share
  const int n = num_splits;
  const int rows_total = args.shape.rows_per_kv_head;
  const int rows = min(kRows, rows_total - tile_row0);
  const int groups = (kMergeGroups - 1 - slice) / n + 1;
  const int items = rows * groups;
  int team = 32;
  while (team > 1 && team * items > kThreads) team /= 2;
  const int teams = kThreads / team;
  const int tid = threadIdx.x;
  const int team_lane = tid % team;
  const int64_t piece_stride = static_cast<int64_t>(args.params.num_heads_kv) * rows_total;
  const int64_t row_base = static_cast<int64_t>(split0) * piece_stride +
                           static_cast<int64_t>(kv_head) * rows_total + tile_row0;
  // scratch: lse[chunk][rows] (rounded up to 4 floats), then partials[chunk][rows][groups][8].
  const int split_floats = rows * (1 + groups * kMergeColumns);
  const int chunk = min(n, (scratch_floats - 4) / split_floats);
  float* lse_s = scratch;
  float* part_s = scratch + (chunk * rows + 3) / 4 * 4;
  auto stage = [&](int c0, int count) {
    __syncthreads();  // everyone is done with the scratch's previous contents
    const int copies = count * rows * groups * 2;
    for (int i = tid; i < copies; i += kThreads) {
      const int half = i & 1;
      int t = i >> 1;
      const int g = t % groups;
      t /= groups;
      const int row = t % rows;
      const int k = t / rows;
      const float* src = args.partial_out +
                         (row_base + static_cast<int64_t>(c0 + k) * piece_stride + row) * kDimV +
                         (slice + g * n) * kMergeColumns + half * 4;
      ptx::cp_async_16(
          ptx::smem_address(part_s + ((k * rows + row) * groups + g) * kMergeColumns + half * 4),
          src, 16);
    }
    ptx::cp_async_commit();
    // The lse, kLseLoads loads in flight per thread (one L2 round trip per kThreads · kLseLoads).
    constexpr int kLseLoads = 8;
    for (int base = tid; base < count * rows; base += kThreads * kLseLoads) {
      float values[kLseLoads];
#pragma unroll
      for (int u = 0; u < kLseLoads; ++u) {
        const int i = base + u * kThreads;
        values[u] = i < count * rows
                        ? __ldcg(args.partial_lse + row_base +
                                 static_cast<int64_t>(c0 + i / rows) * piece_stride + i % rows)
                        : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kLseLoads; ++u) {
        const int i = base + u * kThreads;
        if (i < count * rows) lse_s[i] = values[u];
      }
    }
    ptx::cp_async_wait_all();
    __syncthreads();
  };
  const bool whole = chunk >= n;
  if (whole) stage(0, n);
  for (int item0 = 0; item0 < items; item0 += teams) {  // the same trip counts in every thread
    const int item = item0 + tid / team;
    const bool active = item < items;
    const int row = active ? item % rows : 0;
    const int g = active ? item / rows : 0;
    MergedColumns m;
    m.reset();
    for (int c0 = 0; c0 < n; c0 += chunk) {
      const int count = min(chunk, n - c0);
      if (!whole) stage(c0, count);
      float round_max = -INFINITY;
      if (active)
        for (int k = team_lane; k < count; k += team)
          round_max = fmaxf(round_max, lse_s[k * rows + row]);
      const float new_max = fmaxf(m.max, max_over_team(round_max, team));
      if (new_max == -INFINITY) continue;  // nothing seen yet (the same across the team)
      m.raise_max(new_max);
      if (!active) continue;
      for (int k = team_lane; k < count; k += team) {
        const float4* v = reinterpret_cast<const float4*>(part_s + ((k * rows + row) * groups + g) *
                                                                       kMergeColumns);
        m.add(lse_s[k * rows + row], v[0], v[1]);
      }
    }
    m.reduce_over_team(team);
    if (active && team_lane == 0)
      write_merged_columns(args, seq, kv_head, tile_row0 + row, (slice + g * n) * kMergeColumns, m);
  }
}

// After the part's last piece (every thread calls it): for each split piece this CTA arrived for,
// wait until all of its sequence's pieces have arrived, then merge this CTA's share. `scratch`:
// shared memory no longer in use (the page stages), 16-byte aligned.
template <int kRows>
__device__ __forceinline__ void merge_pending_pieces(const DecodeKernelArgs& args,
                                                     const DecodePlanView& plan,
                                                     const PendingMerges& pending, int kv_head,
                                                     int tile_row0, float* scratch,
                                                     int scratch_floats) {
  wgmma::fence_proxy_async_shared();  // the stages' async-proxy use before these generic writes
  __syncthreads();                    // `pending` is complete
  const int count = pending.count;
  for (int i = 0; i < count; ++i) {
    const int seq = pending.seq[i];
    if (threadIdx.x == 0 && pending.target[i] > 0) {
      const int* counter = combine_counter(args, seq);
      while (ptx::load_acquire_gpu(counter) < pending.target[i]) __nanosleep(32);
    }
    __syncthreads();  // thread 0's acquire before every thread's reads of the other pieces
    const int split0 = plan.split_begin()[seq];
    merge_share<kRows>(args, seq, split0, pending.num_splits[i], pending.split_index[i] - split0,
                       kv_head, tile_row0, scratch, scratch_floats);
    __syncthreads();  // the scratch is free again
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

}  // namespace mla::kernels::decode
