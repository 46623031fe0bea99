// Split-KV MLA decode with Hopper warpgroup MMA (wgmma, sm_90a): 64-row query tiles, two
// warpgroups, a two-stage TMA page pipeline (page_tma.cuh). Included only by
// instantiations/wgmma.cu.
//
// Per 64-token page, warpgroup g (of 2):
//   S[:, 32g:32g+32] = Q · K[32g:32g+32]ᵀ   36 × wgmma m64n32k16, both operands from smem;
//   softmax          row maxima exchanged through smem, P (bf16) → smem;
//   O[:, 256g:+256] += P · V[:, 256g:+256]  4 × wgmma m64n256k16, V read MN-major (transposed).
// A thread's S rows and O rows are the same two rows (wgmma's accumulator layout), so the
// rescale factors never leave registers. Tiles live in shared memory as 64-column blocks of
// 64 rows × 128 B with the 128-byte swizzle (16-byte chunk ^= row & 7): the layout TMA writes and
// wgmma's descriptors describe. Rows past a sequence's end are zeroed after the copy.
// kFusedCombine (kFast, kFused): after a split piece's partial, the CTA arrives on its sequence's
// counter; after its last piece it waits for the sequence's other pieces and merges its share
// (fused_combine.cuh). false: the combine is launched after the kernel.
#pragma once

#include <cstddef>

#include <cmath>

#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "cuda/check.h"
#include "mla_decode/config.h"
#include "mla_decode/fused_combine.cuh"
#include "mla_decode/kernel_args.h"
#include "mla_decode/page_tma.cuh"
#include "mla_decode/tile_epilogue.cuh"
#include "mla_decode/tile_loader.cuh"
#include "mla_decode/tile_scores.cuh"

namespace mla::kernels::decode {

inline constexpr int kWgmmaRows = 64;                         // rows per tile (wgmma M)
inline constexpr int kWgmmaTokensPerGroup = kPageTokens / 2;  // S columns per warpgroup
static_assert(kPageTokens == kWgmmaRows, "a page and a query tile share the 64-row layout");

struct WgmmaSharedStorage {
  alignas(1024) uint8_t q[kPageBytes];
  alignas(1024) uint8_t kv[kStages][kPageBytes];
  alignas(1024) uint8_t p[kColumnBlockBytes];  // [64 rows][64 tokens] bf16, one block
  float row_partial[2][kWgmmaRows];            // per-warpgroup row maxima, then row sums
  alignas(8) uint64_t page_full[kStages];      // TMA completion, one barrier per stage
  PendingMerges pending;                       // the fused combine's split pieces
};
static_assert(sizeof(WgmmaSharedStorage) <= 227 * 1024);
// The fused combine stages partials in q and kv as one region.
static_assert(offsetof(WgmmaSharedStorage, kv) == offsetof(WgmmaSharedStorage, q) + kPageBytes);

// Byte offset of 16-byte chunk `chunk` (0..71) of row `row` (0..63) in a swizzled tile.
__device__ __forceinline__ uint32_t wgmma_tile_offset(int row, int chunk) {
  return (chunk >> 3) * kColumnBlockBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// One body for both kernels (two pages in flight and the early PDL trigger measured slower here
// on 2026-11-30: this body is compute-bound).

template <bool kFusedCombine>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_splitkv_wgmma_kernel(const __grid_constant__ DecodeKernelArgs args) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<WgmmaSharedStorage*>(smem_raw);

  const MlaDecodeParams& p = args.params;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int group = tid / 128;  // warpgroup 0 or 1
  const int warp_in_group = (tid / 32) % 4;
  const auto [kv_head, tile_row0] = row_tile<kWgmmaRows>(args, blockIdx.y);
  // The two accumulator rows of this thread (both for S and for O).
  const int my_rows[2] = {warp_in_group * 16 + lane / 4, warp_in_group * 16 + lane / 4 + 8};

  const uint32_t q_smem = ptx::smem_address(smem.q);
  const uint32_t kv_smem0 = ptx::smem_address(smem.kv[0]);
  const uint32_t p_smem = ptx::smem_address(smem.p);
  if (tid == 0 && ((q_smem | kv_smem0 | p_smem) & 1023) != 0) __trap();  // swizzle atoms need it

  if (tid == 0) {
    tma::prefetch_tensor_map(&args.kv_tensor_map);
    smem.pending.count = 0;  // the fused combine's split pieces (read after a __syncthreads())
  }
  ptx::launch_dependents();  // a dependent combine waits for this grid before reading anything
  const TileLoader<128, kColumnBlockBytes> loader(tid);
  PageTmaPipeline<2> pipeline;
  pipeline.init(tid, kv_smem0, ptx::smem_address(&smem.page_full[0]));
  __syncthreads();

  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};
  PartPieceCursor cursor(plan, p.seqlens, p.max_pages_per_seq, blockIdx.x);
  DecodePiece piece;
  for (bool more = cursor.first(&piece); more; more = cursor.next(&piece)) {
    const int batch_index = piece.seq;

    loader.copy_query_row(q_smem, args, batch_index, kv_head, tile_row0);

    ptx::cp_async_commit();  // the queries
    if (tid == 0) pipeline.issue(args, batch_index, piece.page_begin, kv_head, 0);

    float row_max_run[2], row_sum_part[2];
    int row_last_key[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max_run[h] = -INFINITY;
      row_sum_part[h] = 0.f;
      row_last_key[h] = last_visible_key(args, tile_row0 + my_rows[h], piece.seqlen);
    }
    float o_acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o_acc[i] = 0.f;

    for (int page = piece.page_begin; page < piece.page_end; ++page) {
      const int stage = pipeline.stage();
      ptx::cp_async_wait_all();  // the queries (a no-op after the first page)
      wgmma::fence_proxy_async_shared();
      pipeline.wait_current(tid, smem.kv[stage], piece.seqlen - page * kPageTokens);
      __syncthreads();  // page visible to all; everyone is done with the other stage
      if (tid == 0 && page + 1 < piece.page_end)
        pipeline.issue(args, batch_index, page + 1, kv_head, 1);
      ++pipeline.pages_done;
      const uint32_t kv_stage = kv_smem0 + stage * kPageBytes;

      // S = Q · Kᵀ over this warpgroup's 32 tokens.
      float s_acc[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) s_acc[i] = 0.f;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const uint32_t k_offset = (kk / 4) * kColumnBlockBytes + (kk % 4) * 32;
        const uint64_t desc_q = wgmma::smem_descriptor(q_smem + k_offset, 0, 1024);
        const uint64_t desc_k = wgmma::smem_descriptor(
            kv_stage + k_offset + group * kWgmmaTokensPerGroup * 128, 0, 1024);
        wgmma::mma_m64n32k16_bf16(s_acc, desc_q, desc_k);
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();

      // Scale to base 2, mask, publish this warpgroup's row maxima.
      const int key0 = page * kPageTokens + group * kWgmmaTokensPerGroup + 2 * (lane & 3);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float partial_max =
            scale_mask_row_max<4>(s_acc, h, key0, row_last_key[h], args.scale_log2);
        if ((lane & 3) == 0) smem.row_partial[group][my_rows[h]] = partial_max;
      }
      __syncthreads();

      // Online softmax; P → smem (bf16, swizzled like a tile block); O rescaled in registers.
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = my_rows[h];
        const float page_max = fmaxf(smem.row_partial[0][row], smem.row_partial[1][row]);
        const float new_max = fmaxf(row_max_run[h], page_max);
        const float subtract = new_max == -INFINITY ? 0.f : new_max;
        alpha[h] = ptx::fast_exp2(row_max_run[h] - subtract);
        row_max_run[h] = new_max;
        float sum = row_sum_part[h] * alpha[h];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float p0 = ptx::fast_exp2(s_acc[4 * j + 2 * h] - subtract);
          const float p1 = ptx::fast_exp2(s_acc[4 * j + 2 * h + 1] - subtract);
          sum += p0 + p1;
          const int chunk = (group * kWgmmaTokensPerGroup + 8 * j) / kChunkElems;
          const uint32_t offset = row * 128 + (((chunk & 7) ^ (row & 7)) << 4) + (lane & 3) * 4;
          *reinterpret_cast<uint32_t*>(smem.p + offset) = ptx::pack_bf16x2(p0, p1);
        }
        row_sum_part[h] = sum;
      }
      wgmma::scale_accumulator_rows(o_acc, alpha);
      wgmma::fence_proxy_async_shared();
      __syncthreads();  // P complete

      // O += P · V for this warpgroup's 256 columns (4 blocks of 64).
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kPageTokens / 16; ++ks) {
        const uint64_t desc_p = wgmma::smem_descriptor(p_smem + ks * 32, 0, 1024);
        const uint64_t desc_v = wgmma::smem_descriptor(
            kv_stage + group * (kColsPerGroup / 64) * kColumnBlockBytes + ks * 16 * 128,
            kColumnBlockBytes, 1024);
        wgmma::mma_m64n256k16_bf16_b_mn_major(o_acc, desc_p, desc_v);
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();
    }

    // Epilogue: row sums over the quad and both warpgroups, then out/lse or the partials.
    write_tile_rows<kWgmmaRows>(args, piece, kv_head, tile_row0, group, lane, my_rows, row_sum_part,
                                row_max_run, o_acc, smem.row_partial);
    const bool final_output = piece.num_splits == 1;
    if constexpr (kFusedCombine) {
      if (!final_output) arrive_for_piece(args, piece, smem.pending);
    }
  }
  if constexpr (kFusedCombine) {
    // The page stages are free now: the merge stages the partials there.
    static_assert((sizeof(smem.q) + sizeof(smem.kv)) / sizeof(float) >=
                  kMergeShareMinScratchFloats);
    merge_pending_pieces<kWgmmaRows>(args, plan, smem.pending, kv_head, tile_row0,
                                     reinterpret_cast<float*>(smem.q),
                                     int((sizeof(smem.q) + sizeof(smem.kv)) / sizeof(float)));
    write_empty_sequences<kWgmmaRows>(args, plan, kv_head, tile_row0);
  }
}

void launch_splitkv_wgmma(const DecodeKernelArgs& args, bool fused_combine, cudaStream_t stream) {
  constexpr int kSmemBytes = sizeof(WgmmaSharedStorage);
  auto* kernel = fused_combine ? &mla_decode_splitkv_wgmma_kernel<true>
                               : &mla_decode_splitkv_wgmma_kernel<false>;
  MLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  // 64-row tiles give the same tile count as the plan's shape (checked by the dispatcher).
  const dim3 grid(args.shape.num_parts, args.params.num_heads_kv * args.shape.num_row_tiles);
  // kFused's CTAs wait for each other: all resident at once, or the launch fails.
  launch_cooperative_if(fused_combine, kernel, grid, dim3(kThreads), kSmemBytes, stream, args);
  MLA_CHECK_LAUNCH(fused_combine ? "mla_decode_splitkv_wgmma (fused combine)"
                                 : "mla_decode_splitkv_wgmma");
}

}  // namespace mla::kernels::decode
