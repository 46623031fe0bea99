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
// The pairs order (SeesawOrder::kPairs): pages 2i (a, warpgroup 0's) and 2i + 1 (b, warpgroup
// 1's) form pair i, chained (since the nineteenth session; before, both warpgroups exchanged their
// page maxima and took one common frame, so both ran their softmax at once with the tensor pipe
// idle). Warpgroup 0 issues S_a and then lets warpgroup 1 issue S_b behind it, so its softmax runs
// under S_b. The running frame (the row max the exponents subtract) moves only when a page's row
// max exceeds it by more than kSeesawRescaleSlack (base 2): warpgroup 0 picks page a's frame from
// the running one and exponentiates P_a in it, warpgroup 1 picks page b's from page a's. Both
// publish P (into their page's rope block, which only S reads) and the frame per row; each
// warpgroup rescales its half of O (and its row sums) whenever the P it adds next is in another
// frame, which the slack makes rare, so there is no wait for the other's max: warpgroup 0 issues
// O += P_a·V_a (A from registers) at once, warpgroup 1 issues O += P_a·V_a (A from shared memory)
// as soon as P_a is published, before its own softmax, which then runs under those P·V; then
// P_b·V_b on both, warpgroup 0's first in the tensor pipe: warpgroup 1 waits for its P_a·V, frees
// its half of page a, rescales O if its frame moved, and issues its P_b·V only after warpgroup 0
// has issued its own (named barrier kPbvIssuedBarrier), so that warpgroup 0 starts the next pair
// sooner and its half of page b, with the rope block, is freed first. Pages are copied and
// released by halves: half h (column blocks 4h..4h+3, read by warpgroup h's P·V) is released by
// warpgroup h after its P·V of the page (its four warps meet at its named barrier, and its first
// thread issues half h of page j + 2 at once); the rope block rides with the half of the warpgroup
// that does not own the page (it reads P there). Page a's halves are freed inside the pair (after
// each warpgroup's P_a·V), page b's at the next pair's start; each S reads half 0 first (for page b
// it is freed first), so S_a of the next pair waits for less of its page than S_b. No deadlock:
// every half a warpgroup waits for (its S's pages) was freed either by itself earlier or by the
// other warpgroup before that one's arrival on the barrier (S issued, or P published) the waiter
// passed, or (warpgroup 1's half of page a, freed after its arrival on the P_b barrier) by a
// warpgroup that waits for nothing from the other between that arrival and the release; and each
// named barrier's next arrival needs the other warpgroup past its previous wait, so no generation
// is skipped.
//
// Pages: CTA page c (counted across pieces) lives in stage c mod 2 and completes phase
// (c / 2) mod 2 of that stage's mbarrier. Thread 0 issues a piece's first two pages; after that
// (the S-first and P·V-first orders; the pairs order releases by halves, above) each warp, when
// its wgmmas reading page j have completed, adds 1 to the stage's release count, and the warp
// that completes the count (8 warps) issues page j + 2 into the stage. The owner of
// a page zeroes its rows past the sequence's end (all 9 blocks) before its S reads them.
#pragma once

#include <cstddef>

#include <cmath>
#include <stdexcept>
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
#include "mla_decode/tile_scores.cuh"

namespace mla::kernels::decode {

inline constexpr int kSeesawRows = 64;  // rows per tile (wgmma M)
inline constexpr int kSeesawGroupThreads = 128;
inline constexpr int kSeesawReadyBarrier = 1;  // + the publishing warpgroup (ids 1, 2)
inline constexpr int kSeesawGroupBarrier = 3;  // + the warpgroup (ids 3, 4): its 128 threads
inline constexpr int kPairsPBarrier = 5;  // pairs: + the publishing warpgroup (P and frame ready)
inline constexpr int kChainSIssuedBarrier = 7;  // pairs: warpgroup 0 has issued S_a
inline constexpr int kPbvIssuedBarrier = 8;     // pairs: warpgroup 0 has issued its P_b·V
// How far (base 2) a page's row max may exceed the running frame before the frame moves to it.
inline constexpr float kSeesawRescaleSlack = 8.f;

static_assert(kPageTokens == kSeesawRows, "a page and a query tile share the 64-row layout");
static_assert(kStages == 2 && kThreads == 2 * kSeesawGroupThreads);

struct SeesawSharedStorage {
  alignas(1024) uint8_t q[kPageBytes];
  alignas(1024) uint8_t kv[kStages][kPageBytes];
  alignas(1024) uint8_t p[kColumnBlockBytes];  // P of the last published page, [64][64] bf16
  float page_alpha[kSeesawRows];               // O rescale of the last published page
  float page_max[kSeesawRows];                 // running row max after it (base 2)
  float row_partial[2][kSeesawRows];           // per-warpgroup row sums (epilogue)
  float pair_max[2][kSeesawRows];              // pairs: each warpgroup's frame after its page
  int released[kStages];                       // warps done with a stage, 8 a page (not pairs)
  alignas(8) uint64_t page_full[kStages];      // TMA completion, one barrier per stage
  uint64_t half_full[kStages][2];              // pairs: TMA completion of each half
  uint64_t query_full;                         // the query tile's TMA copy (args.query_by_tma)
  PendingMerges pending;                       // the fused combine's split pieces
};
static_assert(sizeof(SeesawSharedStorage) <= 227 * 1024);
// The pair trace's stamps, in shared memory past the storage (that instantiation only): 32-bit
// cycles after a clock64 read at the traced piece's start, plus 1 (0: not reached),
// [warpgroup][pair][event]. They go to shared memory, not straight to global memory, because a
// global store followed by a release's fence (releases had one until 2026-12-02's barrier
// release) made the fence wait for the store's completion, which put that wait into the very
// release being traced ("P·V done" to "half freed" measured
// 657 / 832 cycles with global stamps, 457 / 518 with these, on the H200, 2026-12-02).
inline constexpr int kPairTraceSmemBytes = kDecodePairTracePairWords * 4;
static_assert(sizeof(SeesawSharedStorage) + kPairTraceSmemBytes <= 227 * 1024);
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

// The diagnostic instantiations: kPairTrace, the pairs order's trace of every CTA's first pairs of
// its piece number args.pair_trace_piece, and every CTA's pieces whole (the piece trace;
// launch_mla_decode_with_pair_trace); kTimeline, every CTA's phases (launch_mla_decode_with_
// timeline). Inside the page loop both stamp through predicated stores, with no branch, so the
// wgmma pipeline stays the production one (the pair trace's zeroing and copy-out branches run
// before and after the pairs, with no wgmma in flight).
enum class SeesawDiagnostic { kNone, kPairTrace, kTimeline };

template <bool kFusedCombine, SeesawOrder kOrder,
          SeesawDiagnostic kDiagnostic = SeesawDiagnostic::kNone>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_splitkv_seesaw_kernel(const __grid_constant__ DecodeKernelArgs args) {
  constexpr bool kSFirst = kOrder == SeesawOrder::kSFirst;
  constexpr bool kPairs = kOrder == SeesawOrder::kPairs;
  constexpr bool kTrace = kDiagnostic == SeesawDiagnostic::kPairTrace;
  constexpr bool kTimeline = kDiagnostic == SeesawDiagnostic::kTimeline;
  // The pairs order with the launched combine stages its epilogue in the query tile and the first
  // page stage and copies the rows out with the TMA engine (write_tile_rows_staged).
  constexpr bool kStagedEpilogue = kPairs && !kFusedCombine;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<SeesawSharedStorage*>(smem_raw);

  const MlaDecodeParams& p = args.params;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  // The plan's part and the (kv head, row tile) of this CTA: the grid is {parts, tiles}, or
  // {tiles, parts} with args.tile_major_grid (a part's row tiles launched next to each other).
  const int part = args.tile_major_grid ? int(blockIdx.y) : int(blockIdx.x);
  const int tile_index = args.tile_major_grid ? int(blockIdx.x) : int(blockIdx.y);
  // kTimeline: thread 0 stamps the TimelineSlot phases (%globaltimer, then clock64) straight into
  // this CTA's words of args.timeline (zeroed by the caller), when `when` holds. "First page
  // landed" is the first page's own half in the pairs order (warpgroup 0's, before its first S).
  const int64_t timeline_index = int64_t(tile_index) * args.shape.num_parts + part;
  uint64_t* const timeline_cta =
      kTimeline ? args.timeline + decode_timeline_stamps_word(timeline_index) : nullptr;
  auto stamp = [&](int slot, bool when) {
    if constexpr (kTimeline) {
      ptx::st_global_u64_if(tid == 0 && when, timeline_cta + slot, ptx::global_timer_ns());
      ptx::st_global_u64_if(tid == 0 && when, timeline_cta + kTimelineSlots + slot,
                            static_cast<uint64_t>(clock64()));
    }
  };
  stamp(kTimelineEntry, true);
  // kTrace: thread 0's field `field` of its piece number `piece_number` (the piece trace, every
  // piece up to kDecodePieceTracePieces): clock64, or `value` itself when given. Its call sites are
  // guarded by `if constexpr (kTrace)` as well: with the arguments evaluated in the production
  // instantiations, ptxas renamed registers in the fused pairs body.
  auto piece_stamp = [&](uint32_t piece_number, int field, bool when, int64_t value = -1) {
    if constexpr (kTrace) {
      uint64_t* const words = args.pair_trace +
                              int64_t(blockIdx.y * gridDim.x + blockIdx.x) * kDecodePairTraceWords +
                              kDecodePairTracePairWords + piece_number * kDecodePieceTraceFields;
      ptx::st_global_u64_if(
          tid == 0 && when && piece_number < kDecodePieceTracePieces, words + field,
          value >= 0 ? static_cast<uint64_t>(value) : static_cast<uint64_t>(clock64()));
    }
  };
  if constexpr (kTimeline) {
    ptx::st_global_u64_if(
        tid == 0,
        args.timeline + decode_timeline_sm_word(int64_t(gridDim.x) * gridDim.y, timeline_index),
        ptx::sm_id());
  }
  // Warpgroup 0 or 1, through a shuffle so that ptxas knows it is warp-uniform: the wgmmas sit in
  // branches on it, and in branches it cannot prove uniform ptxas serializes them.
  const int group = __shfl_sync(0xffffffffu, tid / kSeesawGroupThreads, 0);
  const int tid_in_group = tid % kSeesawGroupThreads;
  const int warp_in_group = tid_in_group / 32;
  const auto [kv_head, tile_row0] = row_tile<kSeesawRows>(args, tile_index);
  // The two accumulator rows of this thread (for S and for O alike).
  const int my_rows[2] = {warp_in_group * 16 + lane / 4, warp_in_group * 16 + lane / 4 + 8};

  const uint32_t q_smem = ptx::smem_address(smem.q);
  const uint32_t kv_smem0 = ptx::smem_address(smem.kv[0]);
  const uint32_t p_smem = ptx::smem_address(smem.p);
  const uint32_t full0 = ptx::smem_address(&smem.page_full[0]);
  const uint32_t half_full0 = ptx::smem_address(&smem.half_full[0][0]);
  const uint32_t query_full = ptx::smem_address(&smem.query_full);
  if (tid == 0) {
    if (((q_smem | kv_smem0 | p_smem) & 1023) != 0) __trap();  // swizzle atoms need it
    for (int stage = 0; stage < kStages; ++stage) {
      tma::barrier_init(full0 + stage * 8, 1);
      smem.released[stage] = 0;
      for (int half = 0; half < 2; ++half)
        tma::barrier_init(half_full0 + (stage * 2 + half) * 8, 1);
    }
    tma::barrier_init(query_full, 1);
    tma::fence_barrier_init();
  }
  if (tid == 0) {
    tma::prefetch_tensor_map(&args.kv_tensor_map);
    if constexpr (kPairs) tma::prefetch_tensor_map(&args.kv_half_tensor_map);
    if (args.query_by_tma) tma::prefetch_tensor_map(&args.q_tensor_map);
    smem.pending.count = 0;  // the fused combine's split pieces (read after a __syncthreads())
  }
  ptx::launch_dependents();  // a dependent combine waits for this grid before reading anything
  const uint64_t l2_policy = tma::evict_first_policy();  // any warp may issue a page
  const TileLoader<128, kColumnBlockBytes> loader(tid);
  __syncthreads();

  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};
  PartPieceCursor cursor(plan, p.seqlens, p.max_pages_per_seq, part);
  DecodePiece piece;
  uint32_t pages_before = 0;   // CTA pages of earlier pieces: page j of this piece is + j
  uint32_t pieces_before = 0;  // earlier pieces (the query tile's TMA phase)
  bool more = cursor.first(&piece);
  stamp(kTimelineFirstPiece, true);
  for (; more; more = cursor.next(&piece)) {
    const int batch_index = piece.seq;
    const int num_pages = piece.page_end - piece.page_begin;
    const uint32_t base = pages_before;
    if constexpr (kTrace) piece_stamp(pieces_before, 0, true);
    if constexpr (kTrace) piece_stamp(pieces_before, kDecodePieceTraceEvents, true, num_pages);

    if constexpr (kStagedEpilogue) {  // the previous piece's row copies have read the staging
      if (base > 0) {
        if (tid < kSeesawRows) tma::bulk_wait_read_all();
        __syncthreads();
      }
    }
    // The queries: by TMA (thread 0, the nine 64-column blocks of the tile, completing on
    // query_full once per piece), or 18 cp.async per thread.
    const bool query_by_tma = args.query_by_tma;
    if (query_by_tma) {
      if (tid == 0) {
        const int hpk = args.heads_per_kv;
        tma::arrive_expect_bytes(query_full, kPageBytes);
#pragma unroll 1
        for (int block = 0; block < kChunksQK / 8; ++block) {
          tma::load_5d(q_smem + block * kColumnBlockBytes, &args.q_tensor_map, query_full,
                       block * 64, tile_row0 % hpk, kv_head, tile_row0 / hpk, batch_index,
                       l2_policy);
        }
      }
    } else {
      loader.copy_query_row(q_smem, args, batch_index, kv_head, tile_row0);
      ptx::cp_async_commit();
    }
    // Pairs order: the barrier of half h of page j.
    auto half_barrier = [&](int j, int h) { return half_full0 + (((base + j) & 1) * 2 + h) * 8; };
    if (tid == 0) {  // every stage is free: the previous piece's wgmmas have completed
      if constexpr (kPairs) {
        // The halves each warpgroup's S needs first (half 0, freed first), then the others.
        const int page_ids[2] = {
            page_id_of(args, batch_index, piece.page_begin),
            num_pages > 1 ? page_id_of(args, batch_index, piece.page_begin + 1) : 0};
        for (int k = 0; k < 4; ++k) {
          const int j = k & 1, h = k >> 1;  // (0, 0), (1, 0), (0, 1), (1, 1)
          if (j < num_pages)
            issue_page_half(args, kv_smem0 + ((base + j) & 1) * kPageBytes, half_barrier(j, h),
                            page_ids[j], kv_head, h, h != (j & 1), l2_policy);
        }
      } else {
        seesaw_issue_page(args, kv_smem0, full0, base, batch_index, piece.page_begin, kv_head,
                          l2_policy);
        if (num_pages > 1)
          seesaw_issue_page(args, kv_smem0, full0, base + 1, batch_index, piece.page_begin + 1,
                            kv_head, l2_policy);
      }
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
      return wgmma::smem_descriptor_words(
                 stage_smem(j) + group * (kColsPerGroup / 64) * kColumnBlockBytes,
                 kColumnBlockBytes, 1024)
          .at(ks * 16 * 128);
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

    if (query_by_tma) {
      tma::wait_parity(query_full, pieces_before & 1);
    } else {
      ptx::cp_async_wait_all();
      wgmma::fence_proxy_async_shared();
    }
    __syncthreads();  // Q complete; the previous piece's merge scratch (p, row_partial) is free
    stamp(kTimelineQueries, base == 0);
    if constexpr (kTrace) piece_stamp(pieces_before, 1, true);

    // Scale to base 2 and mask page j's scores in place; the row maxima over the quad (the P·V-
    // first and S-first orders).
    auto scale_and_mask = [&](float(&s_acc)[32], int j, float(&page_max)[2]) {
      const int key0 = (piece.page_begin + j) * kPageTokens + 2 * (lane & 3);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        page_max[h] = scale_mask_row_max<8>(s_acc, h, key0, row_last_key[h], args.scale_log2);
    };
    // The pairs order leaves S unscaled (P = 2^(x · scale − m), one FFMA) and masks only pages
    // where a row of the tile stops: up to the smallest last visible key of the tile's rows (its
    // first row's; −1 when the tile has rows past the kv head's, which see nothing) none does.
    const int tile_last_key = tile_row0 + kSeesawRows > args.shape.rows_per_kv_head
                                  ? -1
                                  : last_visible_key(args, tile_row0, piece.seqlen);
    auto mask_and_max = [&](float(&s_acc)[32], int j, float(&page_max)[2]) {
      const int page_key0 = (piece.page_begin + j) * kPageTokens;
      const bool mask = page_key0 + kPageTokens - 1 > tile_last_key;
      const int key0 = page_key0 + 2 * (lane & 3);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        page_max[h] =
            mask_row_max_scaled<8>(s_acc, h, key0, row_last_key[h], mask, args.scale_log2);
      }
    };
    // P = 2^(x − subtract) as bf16 A fragments (p_frag[2k + h]: keys 8k + 2(lane % 4) + {0, 1}
    // of row h; k16 step ks uses p_frag[4ks .. 4ks + 3]), and its row sums; kScale (the pairs
    // order, S unscaled): P = 2^(x · scale − subtract), one FFMA.
    auto exponentiate = [&](const float(&s_acc)[32], auto scale_flag, const float(&subtract)[2],
                            uint32_t(&p_frag)[16], float(&sum)[2]) {
      constexpr bool kScale = decltype(scale_flag)::value;
      auto exponent = [&](float x, float sub) {
        return kScale ? fmaf(x, args.scale_log2, -sub) : x - sub;
      };
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // The pairs order (its softmax is on the pair's path) sums in two chains of half the
        // depth; the other orders in one.
        float sums[2] = {0.f, 0.f};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float p0 = ptx::fast_exp2(exponent(s_acc[4 * k + 2 * h], subtract[h]));
          const float p1 = ptx::fast_exp2(exponent(s_acc[4 * k + 2 * h + 1], subtract[h]));
          sums[kScale ? k & 1 : 0] += p0 + p1;
          p_frag[2 * k + h] = ptx::pack_bf16x2(p0, p1);
        }
        sum[h] = kScale ? sums[0] + sums[1] : sums[0];
      }
    };
    auto subtract_of = [](float m) { return m == -INFINITY ? 0.f : m; };
    // The running row max after a page whose row maxima are `page_max`: what P's exponents
    // subtract in the new frame, and O's and the row sums' rescale α = 2^(old − new). The pairs
    // order moves its frame only when the page's max exceeds it by more than kSeesawRescaleSlack
    // (base 2): P ≤ 2^kSeesawRescaleSlack, and most pages keep α = 1 exactly, so the warps skip
    // their 128 multiplies of O. Any common frame of O, the row sums and the lse (lse = frame +
    // log2 sum) gives the same result; the page's owner applies the rule and publishes the frame
    // (pair_max), and the other warpgroup takes it (take_other_frame), so both stay in one frame.
    // (The P·V-first and S-first orders keep the exact running max: the same rule in P·V first,
    // with its own skip, measured slower on small batches.)
    auto advance_running_max = [&](const float(&page_max)[2], float(&subtract)[2],
                                   float(&alpha)[2]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kPairs) {
          const float new_max =
              page_max[h] > row_max_run[h] + kSeesawRescaleSlack ? page_max[h] : row_max_run[h];
          subtract[h] = subtract_of(new_max);
          alpha[h] = new_max == row_max_run[h] ? 1.f : ptx::fast_exp2(row_max_run[h] - subtract[h]);
          row_max_run[h] = new_max;
        } else {
          const float new_max = fmaxf(row_max_run[h], page_max[h]);
          subtract[h] = subtract_of(new_max);
          alpha[h] = ptx::fast_exp2(row_max_run[h] - subtract[h]);
          row_max_run[h] = new_max;
        }
      }
    };
    // O += P·V_j with P from registers, one group.
    auto pv_registers = [&](int j, const uint32_t(&p_frag)[16]) {
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kPageTokens / 16; ++ks) {
        const uint32_t a[4] = {p_frag[4 * ks], p_frag[4 * ks + 1], p_frag[4 * ks + 2],
                               p_frag[4 * ks + 3]};
        wgmma::mma_m64n256k16_bf16_a_regs_b_mn_major(o_acc, a, desc_v(j, ks));
      }
      wgmma::commit_group();
    };
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
        stamp(kTimelineFirstPage, base == 0 && t == 0);
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
        wgmma::scale_accumulator_rows(o_acc, alpha);
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
        // Online softmax over whole rows (a quad holds a row's 64 keys).
        float page_max[2], subtract[2], sum[2], alpha[2];
        uint32_t p_frag[16];
        scale_and_mask(s_acc, t, page_max);
        advance_running_max(page_max, subtract, alpha);
        exponentiate(s_acc, std::false_type(), subtract, p_frag, sum);
#pragma unroll
        for (int h = 0; h < 2; ++h) row_sum_part[h] = row_sum_part[h] * alpha[h] + sum[h];
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

        wgmma::scale_accumulator_rows(o_acc, alpha);
        pv_registers(t, p_frag);
      }
    };
    constexpr std::true_type kYes;
    constexpr std::false_type kNo;
    if constexpr (kPairs) {
      auto wait_half = [&](int j, int h) {
        tma::wait_parity(half_barrier(j, h), ((base + j) >> 1) & 1);
      };
      // This warpgroup is done with its half of page j (and, for the other's page, the rope block
      // holding P): each of its warps has waited for its wgmmas reading it, and its named barrier
      // orders those completions before the copy of half h of page j + 2 into it, which its first
      // thread issues. (A count of the four warps on a shared atomic, with a fence before it, and
      // the fourth warp issuing, took ~2 % longer on the compute-bound rows, 2026-12-02: every
      // shared-memory round trip is slow while the wgmmas read shared memory.) `after_barrier`
      // runs in that thread once the barrier is passed: the pair trace's stamp, else nothing.
      auto release_half = [&](int j, auto after_barrier) {
        seesaw_barrier_sync(kSeesawGroupBarrier + group, kSeesawGroupThreads);
        if (tid_in_group == 0) {
          after_barrier();
          if (j + 2 < num_pages) {
            issue_page_half(args, stage_smem(j), half_barrier(j, group),
                            page_id_of(args, batch_index, piece.page_begin + j + 2), kv_head, group,
                            group != (j & 1), l2_policy);
          }
        }
      };
      const auto no_stamp = [] {};
      // `kBlocks` column blocks of S = Q · K_jᵀ from block `first_block` on (4 k16 steps each).
      auto s_blocks = [&](float(&s_acc)[32], int j, int first_block, auto blocks_flag) {
        constexpr int kBlocks = decltype(blocks_flag)::value;
        const wgmma::SmemDescriptor q_desc = wgmma::smem_descriptor_words(q_smem, 0, 1024);
        const wgmma::SmemDescriptor k_desc = wgmma::smem_descriptor_words(stage_smem(j), 0, 1024);
#pragma unroll
        for (int i = 0; i < 4 * kBlocks; ++i) {
          const uint32_t k_offset = (first_block + i / 4) * kColumnBlockBytes + (i % 4) * 32;
          wgmma::mma_m64n64k16_bf16(s_acc, q_desc.at(k_offset), k_desc.at(k_offset));
        }
      };
      // S of the own page j: half 0 first (freed first: warpgroup 0's P·V of each page goes
      // first; one group), then half 1 and the rope block (a second group). On the sequence's
      // last page the rows past its end are zeroed first, which needs the whole page.
      auto issue_s = [&](float(&s_acc)[32], int j) {
        wait_half(j, 0);
        stamp(kTimelineFirstPage, base == 0 && j == 0);
        if constexpr (kTrace) piece_stamp(pieces_before, 2, j == 0);
        const int tokens_valid = piece.seqlen - (piece.page_begin + j) * kPageTokens;
        if (tokens_valid < kPageTokens) {
          wait_half(j, 1);
          zero_page_tail(smem.kv[(base + j) & 1], tokens_valid, tid_in_group, kSeesawGroupThreads);
          seesaw_barrier_sync(kSeesawGroupBarrier + group, kSeesawGroupThreads);
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) s_acc[i] = 0.f;
        wgmma::fence();
        s_blocks(s_acc, j, 0, std::integral_constant<int, 4>());
        wgmma::commit_group();
        wait_half(j, 1);
        s_blocks(s_acc, j, 4, std::integral_constant<int, 4>());
        s_blocks(s_acc, j, 8, std::integral_constant<int, 1>());
        wgmma::commit_group();
      };
      // P of page j into its rope block (free once S_j is done), swizzled like a tile block.
      auto store_p = [&](int j, const uint32_t(&p_frag)[16]) {
        uint8_t* rope = smem.kv[(base + j) & 1] + 8 * kColumnBlockBytes;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = my_rows[h];
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const uint32_t offset = row * 128 + ((k ^ (row & 7)) << 4) + (lane & 3) * 4;
            *reinterpret_cast<uint32_t*>(rope + offset) = p_frag[2 * k + h];
          }
        }
      };
      // The chain's frames: the publishing warpgroup's running max per row after its page.
      auto publish_frame = [&]() {
        if ((lane & 3) == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) smem.pair_max[group][my_rows[h]] = row_max_run[h];
        }
      };
      // O ·= α per row, skipped by a warp whose rows all keep their frame (α = 1).
      auto rescale_o = [&](const float(&alpha)[2]) {
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
          wgmma::scale_accumulator_rows(o_acc, alpha);
      };
      // This warpgroup takes the other's published frame: its row sums and O (no wgmma may be
      // accumulating into O) are rescaled into it.
      auto take_other_frame = [&]() {
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float frame = smem.pair_max[1 - group][my_rows[h]];
          alpha[h] =
              frame == row_max_run[h] ? 1.f : ptx::fast_exp2(row_max_run[h] - subtract_of(frame));
          row_max_run[h] = frame;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) row_sum_part[h] *= alpha[h];
        rescale_o(alpha);
      };
      auto pv_shared = [&](int j) {  // P from page j's rope block
        wait_half(j, group);         // complete already; orders this warpgroup's reads
        wgmma::fence();
        const wgmma::SmemDescriptor p_desc =
            wgmma::smem_descriptor_words(stage_smem(j) + 8 * kColumnBlockBytes, 0, 1024);
#pragma unroll
        for (int ks = 0; ks < kPageTokens / 16; ++ks)
          wgmma::mma_m64n256k16_bf16_b_mn_major(o_acc, p_desc.at(ks * 32), desc_v(j, ks));
        wgmma::commit_group();
      };

      // kTrace: this warpgroup's event `event` of pair i (every CTA, its piece number
      // args.pair_trace_piece), the clock stored by the warpgroup's first thread into shared
      // memory through a predicated store (no branch: the wgmma pipeline stays the production
      // one), and written to the CTA's words of args.pair_trace as clock64 values after the piece.
      // The events are named by decode_pair_trace_event(). The clock is read after a shared load,
      // so that a stamp after a barrier is its release, not the warp's arrival
      // (clock64_after_shared_load).
      const bool trace_piece = kTrace && pieces_before == uint32_t(args.pair_trace_piece);
      const bool trace_thread = trace_piece && tid_in_group == 0;
      // This warpgroup's stamps (kPairTraceSmemBytes past the storage) and its words of
      // args.pair_trace, both [pair][event].
      constexpr int kTraceWords = kDecodePairTracePairs * kDecodePairTraceEvents;
      uint32_t* const trace_stamps =
          reinterpret_cast<uint32_t*>(smem_raw + sizeof(SeesawSharedStorage)) + group * kTraceWords;
      uint64_t trace_origin = 0;
      if constexpr (kTrace) {
        // Zeroed here, read back by the same thread after the piece.
        if (trace_thread) {
#pragma unroll 1
          for (int k = 0; k < kTraceWords; ++k) trace_stamps[k] = 0;
        }
        trace_origin = clock64();
      }
      auto trace = [&](int i, int event) {
        if constexpr (kTrace) {
          const uint64_t now = ptx::clock64_after_shared_load(ptx::smem_address(&smem.released[0]));
          ptx::st_shared_u32_if(
              trace_thread && i < kDecodePairTracePairs,
              ptx::smem_address(trace_stamps + i * kDecodePairTraceEvents + event),
              static_cast<uint32_t>(now - trace_origin) + 1);
        }
      };

      // Pair i, chained: pages a = 2i (warpgroup 0's) and, when kFull, b = 2i + 1 (warpgroup
      // 1's). S_b is issued behind S_a, so warpgroup 0's softmax runs under S_b and warpgroup 1's
      // under P_a·V. Each warpgroup exponentiates its page in its own frame: warpgroup 0 moves
      // the pair's frame from the running one by page a's max (the slack rule, so it seldom
      // moves), warpgroup 1 from page a's frame by page b's. A warpgroup whose O is in another
      // frame than the P it adds next rescales O first, which the frames' slack makes rare, so
      // neither waits for the other's max before its own P·V: warpgroup 0 issues P_a·V at once,
      // warpgroup 1 issues P_a·V as soon as P_a is published, before its own softmax.
      auto pair = [&](int i, auto full_flag) {
        constexpr bool kFull = decltype(full_flag)::value;
        const int a = 2 * i, b = 2 * i + 1;
        float s_acc[32], subtract[2], alpha[2];
        uint32_t p_frag[16];
        // This warpgroup's page j, its S done: the frame by the slack rule, P (registers and the
        // page's rope block), the frame published and the other warpgroup signalled, the row sums
        // moved into the frame; trace events `event` and `event` + 1. `publisher` is this
        // warpgroup as a compile-time constant (its barrier; a runtime one rescheduled the SASS).
        auto softmax_and_publish = [&](int j, int event, auto publisher) {
          float page_max[2], sum[2];
          mask_and_max(s_acc, j, page_max);
          advance_running_max(page_max, subtract, alpha);
          exponentiate(s_acc, std::true_type(), subtract, p_frag, sum);
          trace(i, event);
          store_p(j, p_frag);
          publish_frame();
          wgmma::fence_proxy_async_shared();
          seesaw_barrier_arrive(kPairsPBarrier + decltype(publisher)::value, kThreads);
          trace(i, event + 1);
#pragma unroll
          for (int h = 0; h < 2; ++h) row_sum_part[h] = row_sum_part[h] * alpha[h] + sum[h];
        };
        // Each warpgroup's last wgmma of the previous pair read its half of page a − 1.
        trace(i, 0);
        wgmma::wait_group<0>();
        seesaw_fence_operands(o_acc);
        if (i > 0) release_half(a - 1, no_stamp);
        trace(i, 1);
        if (group == 0) {
          issue_s(s_acc, a);
          trace(i, 2);
          seesaw_barrier_arrive(kChainSIssuedBarrier, kThreads);  // S_b goes behind S_a
          wgmma::wait_group<0>();
          seesaw_fence_operands(s_acc);
          trace(i, 3);
          softmax_and_publish(a, 4, std::integral_constant<int, 0>());  // the frame of page a
          rescale_o(alpha);
          pv_registers(a, p_frag);
          trace(i, 6);
          if constexpr (kFull) {
            // P_a·V first: this warpgroup's half of page a is free for the next pair's S_a, which
            // would otherwise wait for warpgroup 1's softmax.
            wgmma::wait_group<0>();
            seesaw_fence_operands(o_acc);
            trace(i, 7);
            release_half(a, [&] { trace(i, 8); });
            trace(i, 9);
            seesaw_barrier_sync(kPairsPBarrier + 1, kThreads);  // P_b and page b's frame
            trace(i, 10);
            take_other_frame();
            trace(i, 11);
            pv_shared(b);
            seesaw_barrier_arrive(kPbvIssuedBarrier, kThreads);  // warpgroup 0's P_b·V goes first
            trace(i, 12);
          }
        } else {
          seesaw_barrier_sync(kChainSIssuedBarrier, kThreads);
          trace(i, 2);
          if constexpr (kFull) issue_s(s_acc, b);
          trace(i, 3);
          seesaw_barrier_sync(kPairsPBarrier + 0, kThreads);  // P_a and page a's frame
          trace(i, 4);
          take_other_frame();  // no wgmma accumulates into O now (S_b may run)
          pv_shared(a);
          trace(i, 5);
          if constexpr (kFull) {
            wgmma::wait_group<1>();  // S_b; P_a·V may still run
            seesaw_fence_operands(s_acc);
            trace(i, 6);
            softmax_and_publish(b, 7, std::integral_constant<int, 1>());  // the frame of page b
            // P_a·V done: this warpgroup's half of page a is free, and O can be rescaled. Then
            // P_b·V, behind warpgroup 0's in the tensor pipe (whose half of page b, with the
            // rope block, the next S_b reads first).
            wgmma::wait_group<0>();
            seesaw_fence_operands(o_acc);
            trace(i, 9);
            release_half(a, [&] { trace(i, 10); });
            trace(i, 11);
            rescale_o(alpha);
            seesaw_barrier_sync(kPbvIssuedBarrier, kThreads);
            pv_registers(b, p_frag);
            trace(i, 12);
          }
        }
      };
      int i = 0;
      for (; 2 * i + 1 < num_pages; ++i) pair(i, kYes);
      if (2 * i < num_pages) pair(i, kNo);
      wgmma::wait_group<0>();
      seesaw_fence_operands(o_acc);
      if constexpr (kTrace) piece_stamp(pieces_before, 3, true);
      if constexpr (kTrace) {  // the stamps to global memory, as clock64 values
        if (trace_thread) {
#pragma unroll 1
          for (int k = 0; k < kTraceWords; ++k) {
            args.pair_trace[(blockIdx.y * gridDim.x + blockIdx.x) * kDecodePairTraceWords +
                            group * kTraceWords + k] =
                trace_stamps[k] == 0 ? 0 : trace_origin + trace_stamps[k] - 1;
          }
        }
      }
      stamp(kTimelinePagesDone, true);  // each piece; the last one's stays
    } else {
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
      stamp(kTimelinePagesDone, true);
    }
    pages_before += num_pages;
    ++pieces_before;

    // Epilogue: row sums over the quad and both warpgroups (both in the final max's frame), then
    // out/lse or the partials.
    if constexpr (kStagedEpilogue) {
      // Every wgmma and page copy of the piece is done: the query tile and the stages are free.
      static_assert(kSeesawRows * kStagedPartialRowBytes <= sizeof(smem.q) + sizeof(smem.kv));
      write_tile_rows_staged<kSeesawRows>(args, piece, kv_head, tile_row0, group, lane, my_rows,
                                          row_sum_part, row_max_run, o_acc, smem.row_partial,
                                          smem.q);
    } else {
      write_tile_rows<kSeesawRows>(args, piece, kv_head, tile_row0, group, lane, my_rows,
                                   row_sum_part, row_max_run, o_acc, smem.row_partial);
    }
    stamp(kTimelineStored, true);
    if constexpr (kTrace) piece_stamp(pieces_before - 1, 4, true);
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
  if constexpr (kStagedEpilogue) {
    if (tid < kSeesawRows) tma::bulk_wait_all();  // the last piece's rows, before the CTA ends
  }
  stamp(kTimelineExit, true);
}

template <bool kFusedCombine>
static auto* seesaw_kernel(SeesawOrder order) {
  switch (order) {
    case SeesawOrder::kSFirst:
      return &mla_decode_splitkv_seesaw_kernel<kFusedCombine, SeesawOrder::kSFirst>;
    case SeesawOrder::kPairs:
      return &mla_decode_splitkv_seesaw_kernel<kFusedCombine, SeesawOrder::kPairs>;
    case SeesawOrder::kPvFirst:
      break;
  }
  return &mla_decode_splitkv_seesaw_kernel<kFusedCombine, SeesawOrder::kPvFirst>;
}

// One launch of a seesaw instantiation: the shared memory attribute, the grid, cooperative when
// the combine is fused.
template <typename Kernel>
static void launch_seesaw_kernel(Kernel* kernel, const DecodeKernelArgs& args, bool fused_combine,
                                 cudaStream_t stream, int extra_smem_bytes = 0) {
  const int smem_bytes = sizeof(SeesawSharedStorage) + extra_smem_bytes;
  MLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  // 64-row tiles give the same tile count as the plan's shape (checked by the dispatcher).
  // The fused combine's merge takes blockIdx.x as the part: parts-major only (the dispatcher
  // never asks otherwise; an internal invariant, hence no mla::Error).
  if (fused_combine && args.tile_major_grid)
    throw std::logic_error("mla_decode_splitkv_seesaw: the fused combine needs a parts-major grid");
  const int tiles = args.params.num_heads_kv * args.shape.num_row_tiles;
  const dim3 grid =
      args.tile_major_grid ? dim3(tiles, args.shape.num_parts) : dim3(args.shape.num_parts, tiles);
  // kFused's CTAs wait for each other: all resident at once, or the launch fails.
  launch_cooperative_if(fused_combine, kernel, grid, dim3(kThreads), smem_bytes, stream, args);
  MLA_CHECK_LAUNCH(fused_combine ? "mla_decode_splitkv_seesaw (fused combine)"
                                 : "mla_decode_splitkv_seesaw");
}

void launch_splitkv_seesaw(const DecodeKernelArgs& args, bool fused_combine, SeesawOrder order,
                           cudaStream_t stream) {
  launch_seesaw_kernel(fused_combine ? seesaw_kernel<true>(order) : seesaw_kernel<false>(order),
                       args, fused_combine, stream);
}

void launch_splitkv_seesaw_pair_trace(const DecodeKernelArgs& args, cudaStream_t stream) {
  launch_seesaw_kernel(
      &mla_decode_splitkv_seesaw_kernel<false, SeesawOrder::kPairs, SeesawDiagnostic::kPairTrace>,
      args, false, stream, kPairTraceSmemBytes);
}

void launch_splitkv_seesaw_timeline(const DecodeKernelArgs& args, SeesawOrder order,
                                    cudaStream_t stream) {
  constexpr auto kTimeline = SeesawDiagnostic::kTimeline;
  launch_seesaw_kernel(
      order == SeesawOrder::kPairs
          ? &mla_decode_splitkv_seesaw_kernel<false, SeesawOrder::kPairs, kTimeline>
          : &mla_decode_splitkv_seesaw_kernel<false, SeesawOrder::kPvFirst, kTimeline>,
      args, false, stream);
}

}  // namespace mla::kernels::decode
