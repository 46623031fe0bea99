// The mma.sync MLA decode kernel for tiles of 16 query rows: split-KV over the plan's pieces, a
// two-stage TMA page pipeline (page_tma.cuh) fed one page ahead across piece boundaries,
// queries held in registers, ldmatrix + mma.sync m16n8k16. Included only by
// instantiations/rows16.cu.
//
// Layout of work and shared memory: see config.h. The subtle parts:
// - The queries (16 rows × 576) are the A fragments of all 36 k-steps of S, 144 registers per
//   thread, loaded once per piece: cp.async into the page stage that the piece's second page will
//   use (free then: its last page was the previous piece's, already consumed), ldmatrix into
//   registers, and a proxy fence before thread 0 hands that stage to TMA again.
// - Thread 0 issues the page consumed after the current one as soon as every thread has passed
//   the current page's barrier (so the stage of the page before is free), whichever piece it
//   belongs to: a page stays in flight through every page's compute and across pieces (two
//   stages: with a third, two pages ahead, the CTAs' finish times spread more, config.h).
// - Tokens past a sequence's end never reach P·V as garbage (0 · NaN would be NaN even with
//   P = 0): their rows are zeroed in shared memory after the copy (page_tma.cuh).
// - Scores are kept in base 2 (x = s · scale · log2 e); a row that has seen no key keeps
//   max = -inf, and exponentials subtract 0 instead so no (-inf) - (-inf) appears.
// - Every thread keeps its own partial row sums; they are reduced once per piece, not per page.
// - kFusedCombine (kFast, kFused): after a split piece's partial, the CTA arrives on its sequence's
//   counter; after its last piece it waits for the sequence's other pieces and merges its share of
//   the columns (fused_combine.cuh). false: the combine is launched after the kernel.
#pragma once

#include <cmath>

#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "cuda/check.h"
#include "mla_decode/config.h"
#include "mla_decode/fused_combine.cuh"
#include "mla_decode/kernel_args.h"
#include "mla_decode/page_tma.cuh"
#include "mla_decode/tile_loader.cuh"
#include "common/wgmma.cuh"

namespace mla::kernels::decode {

__device__ __forceinline__ uint32_t swizzled_qk_chunk(int row, int chunk) {
  return static_cast<uint32_t>(row * kChunksQK + (chunk ^ (row & 7)));
}
__device__ __forceinline__ uint32_t swizzled_p_chunk(int row, int chunk) {
  return static_cast<uint32_t>(row * kChunksP + (chunk ^ (row & 7)));
}

// Byte offset of 16-byte chunk `chunk` of token row `row` in a page stage: 64-column blocks of
// 64 rows × 128 B (the TMA box layout), the chunk's low three bits swizzled with (row & 7).
__device__ __forceinline__ uint32_t page_chunk_offset(int row, int chunk) {
  return (chunk >> 3) * kColumnBlockBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// kTimeline: thread 0 stamps the TimelineSlot phases (a diagnostic instantiation; the production
// ones compile without a trace of it). The stamps go to shared memory past the body's storage (an
// address the compiler knows, so the stamps hold no register across the page loop) and leave for
// args.timeline at the CTA's exit.
template <bool kTimeline>
__device__ __forceinline__ void stamp(uint64_t* stamps, int slot) {
  if constexpr (kTimeline) {
    if (threadIdx.x != 0) return;
    if (slot == kTimelineEntry) {  // 0 = not reached (the previous kernel's bytes may be there)
      for (int i = 0; i < 2 * kTimelineSlots; ++i) stamps[i] = 0;
    }
    stamps[slot] = ptx::global_timer_ns();
    stamps[kTimelineSlots + slot] = static_cast<uint64_t>(clock64());
  }
}
template <bool kTimeline>
__device__ __forceinline__ void write_stamps(const DecodeKernelArgs& args, const uint64_t* stamps) {
  if constexpr (kTimeline) {
    if (threadIdx.x != 0) return;
    const int64_t index = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
    uint64_t* cta = args.timeline + decode_timeline_stamps_word(index);
    for (int i = 0; i < 2 * kTimelineSlots; ++i) cta[i] = stamps[i];
    args.timeline[decode_timeline_sm_word(int64_t(gridDim.x) * gridDim.y, index)] = ptx::sm_id();
  }
}
// Shared memory of the 16-row body: its storage, then (the timeline instantiation) the stamps.
template <int kRowsPerTile, bool kTimeline>
inline constexpr int kMmaSmemBytes = int(sizeof(SharedStorage<kRowsPerTile>)) +
                                     (kTimeline ? 2 * kTimelineSlots * 8 : 0);
static_assert(kMmaSmemBytes<16, true> <= 227 * 1024, "must fit the sm_90 opt-in limit");

template <int kRowsPerTile, bool kFusedCombine, bool kTimeline = false>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_splitkv_mma_kernel(const __grid_constant__ DecodeKernelArgs args) {
  using Cfg = TileConfig<kRowsPerTile>;
  constexpr int kMS = Cfg::kMTilesS;
  constexpr int kNS = Cfg::kNTilesS;
  constexpr int kMO = Cfg::kMTilesO;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<SharedStorage<kRowsPerTile>*>(smem_raw);
  uint64_t* const stamps =
      reinterpret_cast<uint64_t*>(smem_raw + sizeof(SharedStorage<kRowsPerTile>));

  const MlaDecodeParams& p = args.params;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const auto [kv_head, tile_row0] = row_tile<kRowsPerTile>(args, blockIdx.y);
  const int rows_total = args.shape.rows_per_kv_head;

  // S phase: this warp's rows [s_row0, +kRowsPerWarpS) × tokens [s_tok0, +kTokensPerWarpS).
  const int s_token_group = warp % Cfg::kTokenGroups;
  const int s_row0 = (warp / Cfg::kTokenGroups) * Cfg::kRowsPerWarpS;
  const int s_tok0 = s_token_group * Cfg::kTokensPerWarpS;
  // O phase: all rows × output columns [o_col0, +64).
  const int o_col0 = warp * kColsPerWarpO;

  const uint32_t p_smem = ptx::smem_address(smem.p);
  const uint32_t kv_smem0 = ptx::smem_address(smem.kv[0]);
  constexpr uint32_t kStageBytes = sizeof(smem.kv[0]);
  static_assert(kStageBytes == kPageBytes && kMS == 1, "one m16 tile of queries per warp");
  uint8_t* p_bytes = reinterpret_cast<uint8_t*>(smem.p);

  const TileLoader<kChunksQK * 16, 128> loader(tid);

  stamp<kTimeline>(stamps, kTimelineEntry);
  if (tid == 0) {
    tma::prefetch_tensor_map(&args.kv_tensor_map);
    smem.pending.count = 0;  // the fused combine's split pieces (read after a __syncthreads())
  }
  // A programmatically dependent combine may be scheduled now: it waits for this grid to finish
  // before reading anything, and only SMs this grid has left take its CTAs.
  ptx::launch_dependents();

  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};
  PartPieceCursor cursor(plan, p.seqlens, p.max_pages_per_seq, blockIdx.x);
  DecodePiece piece;
  const bool has_work = cursor.first(&piece);
  stamp<kTimeline>(stamps, kTimelineFirstPiece);
  // Thread 0's look-ahead: the same pages, issued ahead.
  PartPageStream prefetch(cursor, has_work, piece);

  // The first piece's queries are requested before its pages: they are needed first, and behind
  // two pages' TMA copies they arrived 2.6-7 µs late (the timeline, docs/kernels/mla_decode.md).
  // They go through the stage the second page will use, which the first page leaves free.
  if (has_work && loader.row < kRowsPerTile)
    loader.copy_query_row(kv_smem0 + (kMmaStages - 1) * kStageBytes, args, piece.seq, kv_head,
                          tile_row0);
  ptx::cp_async_commit();

  PageTmaPipeline<kMmaStages> pipeline;
  pipeline.init(tid, kv_smem0, ptx::smem_address(&smem.page_full[0]));
  if (tid == 0) pipeline.issue_first<kMmaStages - 1>(args, prefetch, kv_head);
  __syncthreads();

  for (bool more = has_work; more; more = cursor.next(&piece)) {
    const int batch_index = piece.seq;

    // Queries of this tile → registers, through the stage the piece's second page will use (rows
    // past the kv head's last row are zero-filled). That stage held the previous piece's last
    // page, which everyone finished before that piece's epilogue barrier, and no copy into it is
    // issued before this piece's first page barrier. (The first piece's were requested above,
    // into that same stage.)
    const uint32_t q_stage =
        kv_smem0 + ((pipeline.pages_done + kMmaStages - 1) % kMmaStages) * kStageBytes;
    if (pipeline.pages_done != 0) {
      if (loader.row < kRowsPerTile)
        loader.copy_query_row(q_stage, args, batch_index, kv_head, tile_row0);
      ptx::cp_async_commit();
    }
    ptx::cp_async_wait_all();
    __syncthreads();
    uint32_t q_frag[kKSteps][4];
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      const int row = (lane & 7) + ((lane >> 3) & 1) * 8;
      ptx::ldmatrix_x4(q_frag[kk], q_stage + swizzled_qk_chunk(row, 2 * kk + (lane >> 4)) * 16);
    }
    // The stage goes back to TMA (async proxy) after the page barrier below.
    wgmma::fence_proxy_async_shared();
    if (pipeline.pages_done == 0) stamp<kTimeline>(stamps, kTimelineQueries);

    // Per-row state of the rows this thread holds in the S phase (fragment rows lane/4 and +8).
    float row_max_run[kMS][2];
    float row_sum_part[kMS][2];
    int row_last_key[kMS][2];  // the last key index this row may see
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max_run[ms][h] = -INFINITY;
        row_sum_part[ms][h] = 0.f;
        row_last_key[ms][h] = last_visible_key(
            args, tile_row0 + s_row0 + ms * 16 + (lane >> 2) + h * 8, piece.seqlen);
      }
    }
    float o_acc[kMO][kNTilesO][4];
#pragma unroll
    for (int mo = 0; mo < kMO; ++mo)
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o_acc[mo][nt][i] = 0.f;

    for (int page = piece.page_begin; page < piece.page_end; ++page) {
      const int stage = pipeline.stage();
      pipeline.wait_current(tid, reinterpret_cast<uint8_t*>(smem.kv[stage]),
                            piece.seqlen - page * kPageTokens);
      __syncthreads();  // page visible to all; everyone is done with the page before it
      if (pipeline.pages_done == 0) stamp<kTimeline>(stamps, kTimelineFirstPage);
      if (tid == 0) pipeline.issue_next(args, prefetch, kv_head);  // one page ahead
      ++pipeline.pages_done;
      const uint32_t kv_stage = kv_smem0 + stage * kStageBytes;

      // S = Q · Kᵀ for this warp's rows × tokens.
      float s_acc[kMS][kNS][4];
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms)
#pragma unroll
        for (int ns = 0; ns < kNS; ++ns)
#pragma unroll
          for (int i = 0; i < 4; ++i) s_acc[ms][ns][i] = 0.f;
      // With one n8 tile per warp, S is a chain of 36 dependent mma.sync: the odd k-steps go to a
      // second accumulator so two chains of 18 overlap (added once at the end).
      constexpr int kSChains = kNS == 1 ? 2 : 1;
      float s_odd[kNS][4];
#pragma unroll
      for (int ns = 0; ns < kNS; ++ns)
#pragma unroll
        for (int i = 0; i < 4; ++i) s_odd[ns][i] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t b[kNS][2];
        if constexpr (kNS == 2) {
          const int token = s_tok0 + (lane & 7) + (lane >> 4) * 8;
          uint32_t r[4];
          ptx::ldmatrix_x4(r, kv_stage + page_chunk_offset(token, 2 * kk + ((lane >> 3) & 1)));
          b[0][0] = r[0];
          b[0][1] = r[1];
          b[kNS - 1][0] = r[2];
          b[kNS - 1][1] = r[3];
        } else {
          const int token = s_tok0 + (lane & 7);
          uint32_t r[2];
          ptx::ldmatrix_x2(r, kv_stage + page_chunk_offset(token, 2 * kk + ((lane >> 3) & 1)));
          b[0][0] = r[0];
          b[0][1] = r[1];
        }
#pragma unroll
        for (int ns = 0; ns < kNS; ++ns) {
          if (kk % kSChains == 0) {
            ptx::mma_bf16_16816(s_acc[0][ns], q_frag[kk], b[ns][0], b[ns][1]);
          } else {
            ptx::mma_bf16_16816(s_odd[ns], q_frag[kk], b[ns][0], b[ns][1]);
          }
        }
      }
      if constexpr (kSChains == 2) {
#pragma unroll
        for (int ns = 0; ns < kNS; ++ns)
#pragma unroll
          for (int i = 0; i < 4; ++i) s_acc[0][ns][i] += s_odd[ns][i];
      }

      // Scale to base 2, mask, and publish this warp's partial row maxima.
      const int key0 = page * kPageTokens + s_tok0 + 2 * (lane & 3);
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float partial_max = -INFINITY;
#pragma unroll
          for (int ns = 0; ns < kNS; ++ns) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const int key = key0 + ns * 8 + j;
              float& x = s_acc[ms][ns][h * 2 + j];
              x = key <= row_last_key[ms][h] ? x * args.scale_log2 : -INFINITY;
              partial_max = fmaxf(partial_max, x);
            }
          }
          partial_max = fmaxf(partial_max, __shfl_xor_sync(0xffffffffu, partial_max, 1));
          partial_max = fmaxf(partial_max, __shfl_xor_sync(0xffffffffu, partial_max, 2));
          if ((lane & 3) == 0)
            smem.row_partial[s_token_group][s_row0 + ms * 16 + (lane >> 2) + h * 8] = partial_max;
        }
      }
      __syncthreads();

      // Online softmax: new row maxima, P = 2^(x - max) → smem (bf16), rescale factors → smem.
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = s_row0 + ms * 16 + (lane >> 2) + h * 8;
          float page_max = smem.row_partial[0][row];
#pragma unroll
          for (int g = 1; g < Cfg::kTokenGroups; ++g)
            page_max = fmaxf(page_max, smem.row_partial[g][row]);
          const float new_max = fmaxf(row_max_run[ms][h], page_max);
          const float subtract = new_max == -INFINITY ? 0.f : new_max;
          const float alpha = ptx::fast_exp2(row_max_run[ms][h] - subtract);
          row_max_run[ms][h] = new_max;
          float sum = row_sum_part[ms][h] * alpha;
#pragma unroll
          for (int ns = 0; ns < kNS; ++ns) {
            const float p0 = ptx::fast_exp2(s_acc[ms][ns][h * 2] - subtract);
            const float p1 = ptx::fast_exp2(s_acc[ms][ns][h * 2 + 1] - subtract);
            sum += p0 + p1;
            const int token = s_tok0 + ns * 8;  // chunk-aligned
            const uint32_t offset =
                swizzled_p_chunk(row, token / kChunkElems) * 16 + (lane & 3) * 4;
            *reinterpret_cast<uint32_t*>(p_bytes + offset) = ptx::pack_bf16x2(p0, p1);
          }
          row_sum_part[ms][h] = sum;
          if (s_token_group == 0 && (lane & 3) == 0) smem.row_alpha[row] = alpha;
        }
      }
      __syncthreads();

      // O = alpha · O + P · V, V = the page's first 512 latent columns.
#pragma unroll
      for (int mo = 0; mo < kMO; ++mo) {
        const float alpha_lo = smem.row_alpha[mo * 16 + (lane >> 2)];
        const float alpha_hi = smem.row_alpha[mo * 16 + (lane >> 2) + 8];
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt) {
          o_acc[mo][nt][0] *= alpha_lo;
          o_acc[mo][nt][1] *= alpha_lo;
          o_acc[mo][nt][2] *= alpha_hi;
          o_acc[mo][nt][3] *= alpha_hi;
        }
      }
#pragma unroll
      for (int ks = 0; ks < kPageTokens / 16; ++ks) {
        uint32_t a[kMO][4];
#pragma unroll
        for (int mo = 0; mo < kMO; ++mo) {
          const int row = mo * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ptx::ldmatrix_x4(a[mo], p_smem + swizzled_p_chunk(row, 2 * ks + (lane >> 4)) * 16);
        }
#pragma unroll
        for (int np = 0; np < kNTilesO / 2; ++np) {
          const int token = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int chunk = (o_col0 + np * 16) / kChunkElems + (lane >> 4);
          uint32_t r[4];
          ptx::ldmatrix_x4_trans(r, kv_stage + page_chunk_offset(token, chunk));
#pragma unroll
          for (int mo = 0; mo < kMO; ++mo) {
            ptx::mma_bf16_16816(o_acc[mo][2 * np], a[mo], r[0], r[1]);
            ptx::mma_bf16_16816(o_acc[mo][2 * np + 1], a[mo], r[2], r[3]);
          }
        }
      }
    }

    stamp<kTimeline>(stamps, kTimelinePagesDone);  // each piece; the last one's stays

    // Epilogue: row sums over the quad, then over the token groups (through smem).
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = row_sum_part[ms][h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = s_row0 + ms * 16 + (lane >> 2) + h * 8;
        if ((lane & 3) == 0) {
          smem.row_partial[s_token_group][row] = sum;
          if (s_token_group == 0) smem.row_max[row] = row_max_run[ms][h];
        }
      }
    }
    __syncthreads();

    const bool final_output = piece.num_splits == 1;
#pragma unroll
    for (int mo = 0; mo < kMO; ++mo) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mo * 16 + (lane >> 2) + h * 8;
        const int r = tile_row0 + row;
        if (r >= rows_total) continue;
        float sum = 0.f;
#pragma unroll
        for (int g = 0; g < Cfg::kTokenGroups; ++g) sum += smem.row_partial[g][row];
        const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
        const auto [s, head] = query_row(args, kv_head, r);
        const int col = o_col0 + 2 * (lane & 3);
        if (final_output) {
          auto* out_row = reinterpret_cast<uint16_t*>(p.out) + batch_index * p.out_batch_stride +
                          s * p.out_seq_stride + head * p.out_head_stride;
#pragma unroll
          for (int nt = 0; nt < kNTilesO; ++nt) {
            *reinterpret_cast<uint32_t*>(out_row + col + nt * 8) = ptx::pack_bf16x2(
                o_acc[mo][nt][h * 2] * inv_sum, o_acc[mo][nt][h * 2 + 1] * inv_sum);
          }
        } else {
          const int64_t partial_row =
              (static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) * rows_total + r;
          float* out_row = args.partial_out + partial_row * kDimV;
#pragma unroll
          for (int nt = 0; nt < kNTilesO; ++nt) {
            *reinterpret_cast<float2*>(out_row + col + nt * 8) =
                make_float2(o_acc[mo][nt][h * 2] * inv_sum, o_acc[mo][nt][h * 2 + 1] * inv_sum);
          }
        }
        if (warp == 0 && (lane & 3) == 0) {
          const float lse = sum > 0.f ? (smem.row_max[row] + log2f(sum)) * kLn2
                                      : (final_output ? INFINITY : -INFINITY);
          if (final_output) {
            p.lse[(static_cast<int64_t>(batch_index) * p.num_heads_q + head) * p.seqlen_q + s] =
                lse;
          } else {
            args.partial_lse[(static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) *
                                 rows_total +
                             r] = lse;
          }
        }
      }
    }
    stamp<kTimeline>(stamps, kTimelineStored);
    if constexpr (kFusedCombine) {
      if (!final_output) arrive_for_piece(args, piece, smem.pending);
    }
  }
  if constexpr (kFusedCombine) {
    // The page stages are free now: the merge stages the partials there.
    static_assert((sizeof(smem.kv)) / sizeof(float) >= kMergeShareMinScratchFloats);
    // The tile made again from the block index: held across the page loop, its coordinates
    // spilled (8 B, two page stages).
    const RowTile tile = row_tile<kRowsPerTile>(args, blockIdx.y);
    merge_pending_pieces<kRowsPerTile>(args, plan, smem.pending, tile.kv_head, tile.row0,
                                       reinterpret_cast<float*>(smem.kv),
                                       int(sizeof(smem.kv) / sizeof(float)));
    write_empty_sequences<kRowsPerTile>(args, plan, tile.kv_head, tile.row0);
  }
  stamp<kTimeline>(stamps, kTimelineExit);
  write_stamps<kTimeline>(args, stamps);
}

template <int kRowsPerTile>
void launch_splitkv_mma(const DecodeKernelArgs& args, bool fused_combine, cudaStream_t stream) {
  const int smem_bytes = args.timeline != nullptr ? kMmaSmemBytes<kRowsPerTile, true>
                                                  : kMmaSmemBytes<kRowsPerTile, false>;
  auto* kernel = args.timeline != nullptr
                     ? (fused_combine ? &mla_decode_splitkv_mma_kernel<kRowsPerTile, true, true>
                                      : &mla_decode_splitkv_mma_kernel<kRowsPerTile, false, true>)
                 : fused_combine ? &mla_decode_splitkv_mma_kernel<kRowsPerTile, true>
                                 : &mla_decode_splitkv_mma_kernel<kRowsPerTile, false>;
  // The opt-in shared memory limit is a per-function attribute; setting it costs little and is
  // legal during stream capture, so it is set on every launch (correct on every device).
  MLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const dim3 grid(args.shape.num_parts, args.params.num_heads_kv * args.shape.num_row_tiles);
  // kFused's CTAs wait for each other: all resident at once, or the launch fails.
  launch_cooperative_if(fused_combine, kernel, grid, dim3(kThreads), size_t(smem_bytes), stream,
                        args);
  MLA_CHECK_LAUNCH(fused_combine ? "mla_decode_splitkv_mma (fused combine)"
                                 : "mla_decode_splitkv_mma");
}

}  // namespace mla::kernels::decode
