// The TMA page pipeline shared by the decode bodies (two stages in each): one thread issues each
// 64-token page as 9 boxes of 64 × 64 (128-byte swizzle, L2 evict-first; evict-normal measured
// ~6 % slower (5-8 % by row class), twenty-eighth session) completing on the stage's mbarrier, or,
// in kFast's pairs order, each half of a page (issue_page_half: one 4-block box, plus the rope
// block for one of the halves) on the half's mbarrier; every thread waits on that barrier's phase.
// A CTA counts the pages it has consumed across its pieces; the count selects the stage (count mod
// stages) and the phase parity (count / stages mod 2). PartPageStream (mla_decode_plan.h) lets
// thread 0 issue pages ahead across piece boundaries: the n-th page it issues is the n-th the CTA
// consumes.
//
// TMA copies whole pages, so on a sequence's last page the rows past its end hold whatever the
// cache holds there (NaN in the tests): zero_page_tail() clears them before any read, since
// 0 · NaN would be NaN even with P = 0.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "mla_decode/config.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels::decode {

// The cache page id of page `page` of sequence `seq` (the block table).
__device__ __forceinline__ int page_id_of(const DecodeKernelArgs& args, int seq, int page) {
  const MlaDecodeParams& p = args.params;
  return p.block_table[seq * p.block_table_batch_stride + page];
}

// One thread: the 64-column blocks of cache page `page_id` whose bits are set in `block_mask` (bit
// b: columns [64b, 64b + 64)) into the stage at `stage_smem`, completing on `barrier`.
__device__ __forceinline__ void issue_page_blocks(const DecodeKernelArgs& args, uint32_t stage_smem,
                                                  uint32_t barrier, int page_id, int kv_head,
                                                  uint32_t block_mask, uint64_t l2_policy) {
  tma::arrive_expect_bytes(barrier, __popc(block_mask) * kColumnBlockBytes);
#pragma unroll
  for (int block = 0; block < kChunksQK / 8; ++block) {
    if ((block_mask >> block) & 1u)
      tma::load_4d(stage_smem + block * kColumnBlockBytes, &args.kv_tensor_map, barrier, block * 64,
                   0, page_id, kv_head, l2_policy);
  }
}

static_assert(kChunksQK / 8 == 9, "a page is two 4-block halves and the rope block (block 8)");
// One thread: half `half` of cache page `page_id` (column blocks 4·half .. 4·half + 3, one copy
// through args.kv_half_tensor_map) and, when `with_rope`, its rope block (block 8) into the stage
// at `stage_smem`, completing on `barrier`.
__device__ __forceinline__ void issue_page_half(const DecodeKernelArgs& args, uint32_t stage_smem,
                                                uint32_t barrier, int page_id, int kv_head,
                                                int half, bool with_rope, uint64_t l2_policy) {
  tma::arrive_expect_bytes(barrier, (with_rope ? 5 : 4) * kColumnBlockBytes);
  tma::load_5d(stage_smem + 4 * half * kColumnBlockBytes, &args.kv_half_tensor_map, barrier, 0, 0,
               4 * half, page_id, kv_head, l2_policy);
  if (with_rope)
    tma::load_4d(stage_smem + 8 * kColumnBlockBytes, &args.kv_tensor_map, barrier, 8 * 64, 0,
                 page_id, kv_head, l2_policy);
}

// One thread: cache page `page_id` (kv head `kv_head`) into the stage at `stage_smem`, completing
// on the mbarrier at `barrier`: all of its column blocks.
__device__ __forceinline__ void issue_page_id(const DecodeKernelArgs& args, uint32_t stage_smem,
                                              uint32_t barrier, int page_id, int kv_head,
                                              uint64_t l2_policy) {
  static_assert(kChunksQK / 8 * kColumnBlockBytes == kPageBytes);
  issue_page_blocks(args, stage_smem, barrier, page_id, kv_head, (1u << (kChunksQK / 8)) - 1,
                    l2_policy);
}

// One thread: page `page` of sequence `seq` (kv head `kv_head`) into the stage at `stage_smem`,
// completing on the mbarrier at `barrier`.
__device__ __forceinline__ void issue_page(const DecodeKernelArgs& args, uint32_t stage_smem,
                                           uint32_t barrier, int seq, int page, int kv_head,
                                           uint64_t l2_policy) {
  issue_page_id(args, stage_smem, barrier, page_id_of(args, seq, page), kv_head, l2_policy);
}

// `threads` threads (thread index `tid` among them): zero the rows [tokens_valid, 64) of the
// swizzled page at `stage_bytes`, then fence them before async-proxy (wgmma, TMA) accesses.
__device__ __forceinline__ void zero_page_tail(uint8_t* stage_bytes, int tokens_valid, int tid,
                                               int threads) {
  const int chunks = (kPageTokens - tokens_valid) * kChunksQK;
  for (int c = tid; c < chunks; c += threads) {
    const int row = tokens_valid + c / kChunksQK;
    const int chunk = c % kChunksQK;
    *reinterpret_cast<uint4*>(stage_bytes + (chunk >> 3) * kColumnBlockBytes + row * 128 +
                              (chunk & 7) * 16) = make_uint4(0, 0, 0, 0);
  }
  wgmma::fence_proxy_async_shared();  // order the zeros before wgmma reads and later TMA writes
}

template <int kNumStages = kStages>
struct PageTmaPipeline {
  uint32_t stages_smem = 0;   // stage 0 (1024-byte aligned); stage s at + s · kPageBytes
  uint32_t barriers = 0;      // the mbarrier of stage 0; stage s at + 8 s
  uint32_t pages_done = 0;    // pages this CTA has consumed
  uint32_t pages_issued = 0;  // pages thread 0 has issued (issue_next only)

  // Thread 0 initialises the barriers; the caller then __syncthreads().
  __device__ __forceinline__ void init(int tid, uint32_t stages, uint32_t first_barrier) {
    stages_smem = stages;
    barriers = first_barrier;
    if (tid == 0) {
      if ((stages_smem & 1023) != 0) __trap();  // the 128-byte swizzle needs 1024-byte alignment
      for (int stage = 0; stage < kNumStages; ++stage) tma::barrier_init(barriers + stage * 8, 1);
      tma::fence_barrier_init();
    }
  }

  __device__ __forceinline__ int stage() const { return static_cast<int>(pages_done % kNumStages); }
  __device__ __forceinline__ uint32_t stage_smem(int stage) const {
    return stages_smem + stage * kPageBytes;
  }

  // Thread 0: page `page` of sequence `seq` into the stage of the page consumed `ahead` pages
  // after the current one.
  __device__ __forceinline__ void issue(const DecodeKernelArgs& args, int seq, int page,
                                        int kv_head, int ahead) const {
    const uint32_t stage = (pages_done + ahead) % kNumStages;
    issue_page(args, stage_smem(stage), barriers + stage * 8, seq, page, kv_head,
               tma::evict_first_policy());
  }

  // Thread 0: the stream's next page (if any) into stage pages_issued mod kNumStages. Only for a
  // pipeline fed by issue_next alone, so that issue order is consumption order.
  __device__ __forceinline__ void issue_next(const DecodeKernelArgs& args, PartPageStream& stream,
                                             int kv_head) {
    int seq, page;
    if (!stream.next(&seq, &page)) return;
    const uint32_t stage = pages_issued % kNumStages;
    issue_page(args, stage_smem(stage), barriers + stage * 8, seq, page, kv_head,
               tma::evict_first_policy());
    ++pages_issued;
  }

  // Thread 0, before any other issue: the stream's first `kCount` pages, their block-table
  // entries read together first (one round trip for all of them instead of one per page: each
  // TMA issue is ordered after the loads before it).
  template <int kCount>
  __device__ __forceinline__ void issue_first(const DecodeKernelArgs& args, PartPageStream& stream,
                                              int kv_head) {
    static_assert(kCount >= 1 && kCount <= kNumStages);
    int page_ids[kCount];
    int count = 0;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      int seq, page;
      if (count == i && stream.next(&seq, &page)) {
        page_ids[i] = page_id_of(args, seq, page);
        ++count;
      }
    }
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      if (i < count) {
        const uint32_t stage = pages_issued % kNumStages;
        issue_page_id(args, stage_smem(stage), barriers + stage * 8, page_ids[i], kv_head,
                      tma::evict_first_policy());
        ++pages_issued;
      }
    }
  }

  // Everyone: wait for the current page, then clear its rows past the sequence's end (the caller
  // then __syncthreads() before reading it).
  __device__ __forceinline__ void wait_current(int tid, uint8_t* stage_bytes,
                                               int tokens_valid) const {
    tma::wait_parity(barriers + stage() * 8, (pages_done / kNumStages) & 1);
    if (tokens_valid >= kPageTokens) return;
    zero_page_tail(stage_bytes, tokens_valid, tid, kThreads);
  }
};

}  // namespace mla::kernels::decode
