// Split-KV MLA decode, "seesaw" schedule (kFast, > 16 query rows per kv head; sm_90a wgmma):
// 64-row query tiles, two consumer warpgroups, a two-stage TMA page pipeline. Included only by
// instantiations/seesaw.cu. kBaseline keeps splitkv_wgmma.cuh (both warpgroups in lockstep).
//
// Warpgroup g owns output columns [256g, 256g + 256) (O: 64 × 256 fp32, 128 registers a thread)
// and the S of the pages j ≡ g (mod 2) of each piece (page index counted from the piece's start):
//   owner of page j:  S_j = Q · K_jᵀ        36 × wgmma m64n64k16 (Q and K from shared memory);
//                     softmax (whole rows: a quad of threads holds a row's 64 scores), P_j (bf16)
//                     kept in registers as the A fragments of its own P·V and written to smem;
//                     publishes α_j (O rescale) and the running row max, then O_g = O_g·α_j +
//                     P_j·V_j (4 × wgmma m64n256k16, A from registers, V MN-major).
//   the other one:    waits for page j's publication, O_g = O_g·α_j + P_j·V_j (P from smem).
// Per iteration a warpgroup issues S of its next page and the P·V of the other's last page, then
// runs its softmax: while one warpgroup's softmax runs the other's wgmmas keep the tensor cores
// busy (issue 3; the lockstep body had them 52 % busy). kSFirst: S first (compute-bound tiles);
// else the P·V first, which frees its stage earlier (memory-bound tiles; see the loop).
//
// The one subtle thing: there is ONE P buffer and ONE (α, max) slot in shared memory. The owner
// of page j writes them only after its own P·V of page j−1 (which read P_{j−1} from that buffer)
// has completed, and only after the ready signal of page j−1 (bar.sync), which the other
// warpgroup gives after its P·V of page j−2 completed and after it read α/max of page j−2; so every
// write follows the last read of the previous content. Ready signals: named barrier 1 (warpgroup
// 0 publishes, bar.arrive; warpgroup 1 bar.sync) and 2 (the reverse), 256 threads each.
//
// Pages: CTA page c (counted across pieces) lives in stage c mod 2 and completes phase
// (c / 2) mod 2 of that stage's mbarrier. Thread 0 issues a piece's first two pages; after that
// each warp, when its wgmmas reading page j have completed, adds 1 to the stage's release count,
// and the warp that completes the count (8 warps) issues page j + 2 into the stage. The owner of
// a page zeroes its rows past the sequence's end (all 9 blocks) before its S reads them.
#pragma once

#include <cstddef>

#include <cmath>
#include <type_traits>

#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "cuda/check.h"
#include "mla_decode/config.h"
#include "mla_decode/fused_combine.cuh"
#include "mla_decode/kernel_args.h"
#include "mla_decode/page_tma.cuh"
#include "mla_decode/tile_epilogue.cuh"
#include "mla_decode/tile_loader.cuh"

namespace mla::kernels::decode {

inline constexpr int kSeesawRows = 64;  // rows per tile (wgmma M)
inline constexpr int kSeesawGroupThreads = 128;
inline constexpr int kSeesawReadyBarrier = 1;  // + the publishing warpgroup (ids 1, 2)
inline constexpr int kSeesawGroupBarrier = 3;  // + the warpgroup (ids 3, 4): its 128 threads
static_assert(kPageTokens == kSeesawRows, "a page and a query tile share the 64-row layout");
static_assert(kStages == 2 && kThreads == 2 * kSeesawGroupThreads);

struct SeesawSharedStorage {
  alignas(1024) uint8_t q[kPageBytes];
  alignas(1024) uint8_t kv[kStages][kPageBytes];
  alignas(1024) uint8_t p[kColumnBlockBytes];  // P of the last published page, [64][64] bf16
  float page_alpha[kSeesawRows];               // O rescale of the last published page
  float page_max[kSeesawRows];                 // running row max after it (base 2)
  float row_partial[2][kSeesawRows];           // per-warpgroup row sums (epilogue)
  int released[kStages];                       // warps done with each stage, 8 per page
  alignas(8) uint64_t page_full[kStages];      // TMA completion, one barrier per stage
  PendingMerges pending;                       // the fused combine's split pieces
};
static_assert(sizeof(SeesawSharedStorage) <= 227 * 1024);
// The fused combine stages partials in q and kv as one region.
static_assert(offsetof(SeesawSharedStorage, kv) == offsetof(SeesawSharedStorage, q) + kPageBytes);

__device__ __forceinline__ void seesaw_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void seesaw_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Pins accumulator registers at this point of the program: the wgmma waits are asm statements
// without register operands, so the compiler could otherwise move reads or writes of the
// accumulators across them (and ptxas would then serialize the wgmmas).
template <int kCount>
__device__ __forceinline__ void seesaw_fence_operands(float (&registers)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(registers[i])::"memory");
}

// One thread: page `page` of sequence `seq` as CTA page `cta_page` (stage cta_page mod 2).
__device__ __forceinline__ void seesaw_issue_page(const DecodeKernelArgs& args, uint32_t kv_smem0,
                                                  uint32_t full0, uint32_t cta_page, int seq,
                                                  int page, int kv_head, uint64_t l2_policy) {
  const uint32_t stage = cta_page & 1;
  issue_page(args, kv_smem0 + stage * kPageBytes, full0 + stage * 8, seq, page, kv_head, l2_policy);
}

template <bool kFusedCombine, bool kSFirst>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_splitkv_seesaw_kernel(const __grid_constant__ DecodeKernelArgs args) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<SeesawSharedStorage*>(smem_raw);

  const MlaDecodeParams& p = args.params;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  // Warpgroup 0 or 1, through a shuffle so that ptxas knows it is warp-uniform: the wgmmas sit in
  // branches on it, and in branches it cannot prove uniform ptxas serializes them.
  const int group = __shfl_sync(0xffffffffu, tid / kSeesawGroupThreads, 0);
  const int tid_in_group = tid % kSeesawGroupThreads;
  const int warp_in_group = tid_in_group / 32;
  const int kv_head = blockIdx.y / args.shape.num_row_tiles;
  const int tile_row0 = (blockIdx.y % args.shape.num_row_tiles) * kSeesawRows;
  // The two accumulator rows of this thread (for S and for O alike).
  const int my_rows[2] = {warp_in_group * 16 + lane / 4, warp_in_group * 16 + lane / 4 + 8};

  const uint32_t q_smem = ptx::smem_address(smem.q);
  const uint32_t kv_smem0 = ptx::smem_address(smem.kv[0]);
  const uint32_t p_smem = ptx::smem_address(smem.p);
  const uint32_t full0 = ptx::smem_address(&smem.page_full[0]);
  if (tid == 0) {
    if (((q_smem | kv_smem0 | p_smem) & 1023) != 0) __trap();  // swizzle atoms need it
    for (int stage = 0; stage < kStages; ++stage) {
      tma::barrier_init(full0 + stage * 8, 1);
      smem.released[stage] = 0;
    }
    tma::fence_barrier_init();
  }
  if (tid == 0) {
    tma::prefetch_tensor_map(&args.kv_tensor_map);
    smem.pending.count = 0;  // the fused combine's split pieces (read after a __syncthreads())
  }
  ptx::launch_dependents();  // a dependent combine waits for this grid before reading anything
  const uint64_t l2_policy = tma::evict_first_policy();  // any warp may issue a page
  const TileLoader<128, kColumnBlockBytes> loader(tid);
  __syncthreads();

  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};
  PartPieceCursor cursor(plan, p.seqlens, p.max_pages_per_seq, blockIdx.x);
  DecodePiece piece;
  uint32_t pages_before = 0;  // CTA pages of earlier pieces: page j of this piece is + j
  for (bool more = cursor.first(&piece); more; more = cursor.next(&piece)) {
    const int batch_index = piece.seq;
    const int num_pages = piece.page_end - piece.page_begin;
    const uint32_t base = pages_before;

    loader.copy_query_row(q_smem, args, batch_index, kv_head, tile_row0);
    ptx::cp_async_commit();  // the queries
    if (tid == 0) {          // every stage is free: the previous piece's wgmmas have completed
      seesaw_issue_page(args, kv_smem0, full0, base, batch_index, piece.page_begin, kv_head,
                        l2_policy);
      if (num_pages > 1)
        seesaw_issue_page(args, kv_smem0, full0, base + 1, batch_index, piece.page_begin + 1,
                          kv_head, l2_policy);
    }

    // This warp is done with page j (its wgmmas reading it have completed): count it, and the
    // eighth warp issues page j + 2 into the stage.
    auto release = [&](int j) {
      if (lane == 0) {
        const uint32_t cta_page = base + j;
        // Release this warp's reads of the stage before counting it; the issuing lane orders the
        // other warps' counted releases before its TMA write (a relaxed shared atomic alone does
        // not, in the memory model).
        __threadfence_block();
        const int before = atomicAdd(&smem.released[cta_page & 1], 1);
        if (before % kWarps == kWarps - 1 && j + 2 < num_pages) {
          __threadfence_block();
          seesaw_issue_page(args, kv_smem0, full0, cta_page + 2, batch_index,
                            piece.page_begin + j + 2, kv_head, l2_policy);
        }
      }
      __syncwarp();
    };
    auto wait_page = [&](int j) {
      const uint32_t cta_page = base + j;
      tma::wait_parity(full0 + (cta_page & 1) * 8, (cta_page >> 1) & 1);
    };
    auto stage_smem = [&](int j) { return kv_smem0 + ((base + j) & 1) * kPageBytes; };
    // This warpgroup's 256 V columns of page j (4 blocks of 64), MN-major, k16 step ks.
    auto desc_v = [&](int j, int ks) {
      return wgmma::smem_descriptor(
          stage_smem(j) + group * (kColsPerGroup / 64) * kColumnBlockBytes + ks * 16 * 128,
          kColumnBlockBytes, 1024);
    };

    float row_max_run[2], row_sum_part[2];
    int row_last_key[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max_run[h] = -INFINITY;
      row_sum_part[h] = 0.f;  // this warpgroup's pages only, in the frame of row_max_run
      row_last_key[h] = last_visible_key(args, tile_row0 + my_rows[h], piece.seqlen);
    }
    float o_acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o_acc[i] = 0.f;

    ptx::cp_async_wait_all();
    wgmma::fence_proxy_async_shared();
    __syncthreads();  // Q complete; the previous piece's merge scratch (p, row_partial) is free

    // One iteration, t: S of page t (kOwn: t < num_pages), P·V of page t − 1 (kPrev: t ≥ 1, the
    // other warpgroup's page), then the softmax and P·V of page t. The flags are compile-time so
    // that every wgmma wait sees the same groups on every path (ptxas tracks wgmmas in flight
    // along all paths, feasible or not, and serializes them where it cannot prove a wait covers
    // them). An accumulator is written by ordinary instructions only while no wgmma accumulating
    // into it is in flight, and read only after a wait that covers it.
    // Order in the steady state (kSFirst): S of page t is issued before the wait for the other's
    // page t − 1, so S runs while the other warpgroup finishes its softmax: the seesaw proper,
    // for compute-bound tiles. Else P·V of page t − 1 first: it completes first, and its stage is
    // released (page t + 1 issued) before S of page t ends, about a page earlier: for memory-bound
    // tiles, which need the next page in flight more than the overlap.
    auto iteration = [&](int t, auto own_flag, auto prev_flag) {
      constexpr bool kOwn = decltype(own_flag)::value;
      constexpr bool kPrev = decltype(prev_flag)::value;
      constexpr bool kPvFirst = kOwn && kPrev && !kSFirst;
      // This warpgroup's P·V of page t − 2 (own), the one group in flight (none at t = 0, 1).
      wgmma::wait_group<0>();
      seesaw_fence_operands(o_acc);
      if (t >= 2) release(t - 2);
      float s_acc[32];
      // S of page t (own): wait for the page, zero its tail, issue 36 wgmmas, one group.
      auto issue_s = [&]() {
        wait_page(t);
        const int tokens_valid = piece.seqlen - (piece.page_begin + t) * kPageTokens;
        if (tokens_valid < kPageTokens) {  // the sequence's last page: zero the rows past its end
          zero_page_tail(smem.kv[(base + t) & 1], tokens_valid, tid_in_group, kSeesawGroupThreads);
          seesaw_barrier_sync(kSeesawGroupBarrier + group, kSeesawGroupThreads);
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) s_acc[i] = 0.f;
        wgmma::fence();  // the zeroed S before the wgmmas that accumulate it
        const uint32_t kv_stage = stage_smem(t);
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          const uint32_t k_offset = (kk / 4) * kColumnBlockBytes + (kk % 4) * 32;
          const uint64_t desc_q = wgmma::smem_descriptor(q_smem + k_offset, 0, 1024);
          const uint64_t desc_k = wgmma::smem_descriptor(kv_stage + k_offset, 0, 1024);
          wgmma::mma_m64n64k16_bf16(s_acc, desc_q, desc_k);
        }
        wgmma::commit_group();
      };
      // P·V of page t − 1 (the other warpgroup's): wait for its publication, rescale O, one group.
      auto issue_pv_of_other = [&]() {
        seesaw_barrier_sync(kSeesawReadyBarrier + (1 - group), kThreads);
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          alpha[h] = smem.page_alpha[my_rows[h]];
          row_max_run[h] = smem.page_max[my_rows[h]];
          row_sum_part[h] *= alpha[h];
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          o_acc[4 * i + 0] *= alpha[0];
          o_acc[4 * i + 1] *= alpha[0];
          o_acc[4 * i + 2] *= alpha[1];
          o_acc[4 * i + 3] *= alpha[1];
        }
        wait_page(t - 1);  // complete already (its owner waited); orders this warpgroup's reads
        wgmma::fence();    // the rescaled O before the wgmmas that accumulate it
#pragma unroll
        for (int ks = 0; ks < kPageTokens / 16; ++ks) {
          const uint64_t desc_p = wgmma::smem_descriptor(p_smem + ks * 32, 0, 1024);
          wgmma::mma_m64n256k16_bf16_b_mn_major(o_acc, desc_p, desc_v(t - 1, ks));
        }
        wgmma::commit_group();
      };
      if constexpr (kPvFirst) issue_pv_of_other();
      if constexpr (kOwn) issue_s();
      if constexpr (kPrev && !kPvFirst) issue_pv_of_other();

      if constexpr (kOwn) {
        if constexpr (kPvFirst) {
          wgmma::wait_group<1>();  // the P·V of page t − 1: release its stage early
          seesaw_fence_operands(o_acc);
          release(t - 1);
          wgmma::wait_group<0>();  // S of page t
        } else if constexpr (kPrev) {
          wgmma::wait_group<1>();  // S of page t; the P·V of page t − 1 may still run
        } else {
          wgmma::wait_group<0>();
        }
        seesaw_fence_operands(s_acc);
        // Scale to base 2, mask, online softmax over whole rows (a quad holds a row's 64 keys).
        // p_frag[2j + h]: keys 8j + 2(lane % 4) + {0, 1} of row h, bf16x2: for k16 step ks the
        // A fragment of P·V is p_frag[4ks .. 4ks + 3].
        const int key0 = (piece.page_begin + t) * kPageTokens + 2 * (lane & 3);
        uint32_t p_frag[16];
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float x[16];
          float page_max = -INFINITY;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              x[2 * j + e] = key0 + 8 * j + e <= row_last_key[h]
                                 ? s_acc[4 * j + 2 * h + e] * args.scale_log2
                                 : -INFINITY;
              page_max = fmaxf(page_max, x[2 * j + e]);
            }
          }
          page_max = fmaxf(page_max, __shfl_xor_sync(0xffffffffu, page_max, 1));
          page_max = fmaxf(page_max, __shfl_xor_sync(0xffffffffu, page_max, 2));
          const float new_max = fmaxf(row_max_run[h], page_max);
          const float subtract = new_max == -INFINITY ? 0.f : new_max;
          alpha[h] = ptx::fast_exp2(row_max_run[h] - subtract);
          row_max_run[h] = new_max;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float p0 = ptx::fast_exp2(x[2 * j] - subtract);
            const float p1 = ptx::fast_exp2(x[2 * j + 1] - subtract);
            sum += p0 + p1;
            p_frag[2 * j + h] = ptx::pack_bf16x2(p0, p1);
          }
          row_sum_part[h] = row_sum_part[h] * alpha[h] + sum;
        }
        if constexpr (!kPvFirst) {  // this warpgroup's P·V of page t − 1 read P and that stage
          wgmma::wait_group<0>();
          seesaw_fence_operands(o_acc);
          if constexpr (kPrev) release(t - 1);
        }
        // Publish P (swizzled like a tile block), α and the running max for the other warpgroup.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = my_rows[h];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const uint32_t offset = row * 128 + ((j ^ (row & 7)) << 4) + (lane & 3) * 4;
            *reinterpret_cast<uint32_t*>(smem.p + offset) = p_frag[2 * j + h];
          }
          if ((lane & 3) == 0) {
            smem.page_alpha[row] = alpha[h];
            smem.page_max[row] = row_max_run[h];
          }
        }
        wgmma::fence_proxy_async_shared();
        seesaw_barrier_arrive(kSeesawReadyBarrier + group, kThreads);

#pragma unroll
        for (int i = 0; i < 32; ++i) {
          o_acc[4 * i + 0] *= alpha[0];
          o_acc[4 * i + 1] *= alpha[0];
          o_acc[4 * i + 2] *= alpha[1];
          o_acc[4 * i + 3] *= alpha[1];
        }
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kPageTokens / 16; ++ks) {
          const uint32_t a[4] = {p_frag[4 * ks], p_frag[4 * ks + 1], p_frag[4 * ks + 2],
                                 p_frag[4 * ks + 3]};
          wgmma::mma_m64n256k16_bf16_a_regs_b_mn_major(o_acc, a, desc_v(t, ks));
        }
        wgmma::commit_group();
      }
    };
    constexpr std::true_type kYes;
    constexpr std::false_type kNo;
    int t = group;
    if (t == 0) {  // warpgroup 0's first page: nothing before it
      iteration(0, kYes, kNo);
      t += 2;
    }
    for (; t < num_pages; t += 2) iteration(t, kYes, kYes);
    if (t == num_pages) iteration(t, kNo, kYes);  // the other warpgroup's last page only
    wgmma::wait_group<0>();
    seesaw_fence_operands(o_acc);
    release(num_pages - 1);  // every warpgroup's last P·V is of the piece's last page
    pages_before += num_pages;

    // Epilogue: row sums over the quad and both warpgroups (both in the final max's frame), then
    // out/lse or the partials.
    write_tile_rows<kSeesawRows>(args, piece, kv_head, tile_row0, group, lane, my_rows,
                                 row_sum_part, row_max_run, o_acc, smem.row_partial);
    const bool final_output = piece.num_splits == 1;
    if constexpr (kFusedCombine) {
      if (!final_output) arrive_for_piece(args, piece, smem.pending);
    }
  }
  if constexpr (kFusedCombine) {
    // The page stages and the query tile are free now: the merge stages the partials there.
    static_assert((sizeof(smem.q) + sizeof(smem.kv)) / sizeof(float) >=
                  kMergeShareMinScratchFloats);
    merge_pending_pieces<kSeesawRows>(args, plan, smem.pending, kv_head, tile_row0,
                                      reinterpret_cast<float*>(smem.q),
                                      int((sizeof(smem.q) + sizeof(smem.kv)) / sizeof(float)));
    write_empty_sequences<kSeesawRows>(args, plan, kv_head, tile_row0);
  }
}

void launch_splitkv_seesaw(const DecodeKernelArgs& args, bool fused_combine, bool s_first,
                           cudaStream_t stream) {
  constexpr int kSmemBytes = sizeof(SeesawSharedStorage);
  auto* kernel = fused_combine ? (s_first ? &mla_decode_splitkv_seesaw_kernel<true, true>
                                          : &mla_decode_splitkv_seesaw_kernel<true, false>)
                               : (s_first ? &mla_decode_splitkv_seesaw_kernel<false, true>
                                          : &mla_decode_splitkv_seesaw_kernel<false, false>);
  MLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  // 64-row tiles give the same tile count as the plan's shape (checked by the dispatcher).
  const dim3 grid(args.shape.num_parts, args.params.num_heads_kv * args.shape.num_row_tiles);
  // kFused's CTAs wait for each other: all resident at once, or the launch fails.
  launch_cooperative_if(fused_combine, kernel, grid, dim3(kThreads), kSmemBytes, stream, args);
  MLA_CHECK_LAUNCH(fused_combine ? "mla_decode_splitkv_seesaw (fused combine)"
                                 : "mla_decode_splitkv_seesaw");
}

}  // namespace mla::kernels::decode
