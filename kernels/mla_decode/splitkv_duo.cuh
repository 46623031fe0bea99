// Split-KV MLA decode, "duo" body (an experiment of issue 3, kFast with MLA_DECODE_DUO=1): the
// two 64-row query tiles of a kv head that read the same pages run as one 2-CTA cluster, and the
// CTAs split the page's columns instead of the rows. Included by instantiations/seesaw.cu after
// splitkv_seesaw.cuh, whose helpers it uses.
//
// Why: the seesaw's CTA takes in a whole page (73,728 B) per 64 rows, and a compute-bound pair
// waits ~2,200 cycles for its pages (fourteenth session): with every SM pulling pages, the L2 gives
// ~20-35 B per SM cycle, about what the tensor cores need at their peak. Here each CTA takes in
// 5 of a page's 9 column blocks (40,960 B) for 128 rows: half the bytes per FLOP, and a stage is
// small enough for three of them.
//
// CTA `rank` (0 or 1) of the cluster holds columns [256 rank, 256 rank + 256) of the 512 latent
// ones (its four "nope" blocks) and the rope block; of the rope block's four k16 steps it uses
// 2 rank and 2 rank + 1 (from registers on the query side). Warpgroup g of either CTA owns rows
// [64 g, 64 g + 64) of the cluster's 128. Per page j, each warpgroup:
//   S_own = Q_g[:, own columns] · K_j[:, own columns]ᵀ     16 + 2 wgmma m64n64k16
//   sends S_own (fp32, 16 KB) into the peer CTA's warpgroup g's exchange buffer, adds the peer's:
//   S = S_own + S_peer, the same bits in both CTAs (fp32 addition commutes), so both take the
//   same softmax: one frame, identical P, no other exchange;
//   O_g[:, own 256 columns] = O·α + P · V_j[:, own columns]    4 wgmma m64n256k16, A from
//   registers.
// S of page j + 1 is issued before the softmax of page j (the tensor cores run it meanwhile).
//
// Pages: CTA page c (counted across pieces) lives in stage c mod 3 and completes phase (c / 3)
// mod 2 of that stage's mbarrier; each warp counts its release of a page (its S and P·V of it have
// completed) and the eighth issues page j + 3 into the stage. Exchange: warpgroup g's buffer in
// each CTA has a "full" mbarrier (128 arrivals of the peer's threads, after their stores) and the
// writer's CTA an "empty" one (128 arrivals of the reader's threads, after their loads); page c
// is phase c of both. At a piece's start the query tile's rope block is staged in the exchange
// buffers and taken into registers, then a cluster barrier opens them to the peer.
#pragma once

#include "common/cluster.cuh"

namespace mla::kernels::decode {

inline constexpr int kDuoRows = 2 * kSeesawRows;  // query rows per cluster
inline constexpr int kDuoStages = 3;
inline constexpr int kDuoBlocks = 5;  // a CTA's column blocks of a page: its 4 nope + the rope
inline constexpr int kDuoStageBytes = kDuoBlocks * kColumnBlockBytes;    // 40,960
inline constexpr int kDuoQueryBlockBytes = kDuoRows * 128;               // 128 rows × 64 columns
inline constexpr int kDuoExchangeBytes = kSeesawRows * kPageTokens * 4;  // one warpgroup's S
inline constexpr int kDuoSlowestRelease = kWarps - 1;                    // the eighth warp
inline constexpr int kDuoTurnBarrier = 1;  // + the warpgroup whose turn it is to issue (ids 1, 2)

struct DuoSharedStorage {
  alignas(1024) uint8_t q[4][kDuoQueryBlockBytes];  // this CTA's 4 nope blocks of the 128 rows
  alignas(1024) uint8_t kv[kDuoStages][kDuoStageBytes];
  // Per warpgroup: the peer's partial S of the current page, [8][128 threads] float4 (each
  // thread's accumulator fragment, as the peer's same thread holds it). At a piece's start
  // exchange[0] holds the query tile's rope block (128 rows × 128 B) on its way to registers.
  alignas(1024) uint8_t exchange[2][kDuoExchangeBytes];
  int released[kDuoStages];
  alignas(8) uint64_t page_full[kDuoStages];
  uint64_t exchange_full[2];
  uint64_t exchange_empty[2];
  uint64_t query_full;
};
static_assert(sizeof(DuoSharedStorage) <= 227 * 1024);
static_assert(kDuoRows * 128 <= kDuoExchangeBytes, "the rope block is staged in exchange[0]");

// The global column block of local block `block` (0-3 nope, 4 the rope) of CTA `rank`.
__device__ __forceinline__ int duo_global_block(int block, uint32_t rank) {
  return block < 4 ? 4 * static_cast<int>(rank) + block : 8;
}

// One thread: this CTA's 5 column blocks of cache page `page_id` into the stage at `stage_smem`.
__device__ __forceinline__ void duo_issue_page(const DecodeKernelArgs& args, uint32_t stage_smem,
                                               uint32_t barrier, int page_id, int kv_head,
                                               uint32_t rank, uint64_t l2_policy) {
  tma::arrive_expect_bytes(barrier, kDuoStageBytes);
#pragma unroll
  for (int block = 0; block < kDuoBlocks; ++block) {
    tma::load_4d(stage_smem + block * kColumnBlockBytes, &args.kv_tensor_map, barrier,
                 duo_global_block(block, rank) * 64, 0, page_id, kv_head, l2_policy);
  }
}

// `threads` threads: zero rows [tokens_valid, 64) of a stage's 5 swizzled blocks, then fence them
// before async-proxy reads.
__device__ __forceinline__ void duo_zero_page_tail(uint8_t* stage_bytes, int tokens_valid, int tid,
                                                   int threads) {
  constexpr int kChunksPerRow = kDuoBlocks * 8;
  const int chunks = (kPageTokens - tokens_valid) * kChunksPerRow;
  for (int c = tid; c < chunks; c += threads) {
    const int row = tokens_valid + c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    *reinterpret_cast<uint4*>(stage_bytes + (chunk >> 3) * kColumnBlockBytes + row * 128 +
                              (chunk & 7) * 16) = make_uint4(0, 0, 0, 0);
  }
  wgmma::fence_proxy_async_shared();
}

__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_splitkv_duo_kernel(const __grid_constant__ DecodeKernelArgs args) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<DuoSharedStorage*>(smem_raw);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int group = __shfl_sync(0xffffffffu, tid / kSeesawGroupThreads, 0);
  const int tid_in_group = tid % kSeesawGroupThreads;
  const int warp_in_group = tid_in_group / 32;
  const uint32_t rank = cluster::rank();
  const uint32_t peer = rank ^ 1u;
  const int kv_head = blockIdx.y / args.shape.num_row_tiles;
  const int cluster_row0 = ((blockIdx.y % args.shape.num_row_tiles) & ~1) * kSeesawRows;
  const int group_row0 = cluster_row0 + group * kSeesawRows;
  const int my_rows[2] = {warp_in_group * 16 + lane / 4, warp_in_group * 16 + lane / 4 + 8};

  const uint32_t q_smem = ptx::smem_address(smem.q);
  const uint32_t kv_smem0 = ptx::smem_address(smem.kv[0]);
  const uint32_t exchange_smem = ptx::smem_address(smem.exchange[0]);
  const uint32_t full0 = ptx::smem_address(&smem.page_full[0]);
  const uint32_t my_full = ptx::smem_address(&smem.exchange_full[group]);
  const uint32_t my_empty = ptx::smem_address(&smem.exchange_empty[group]);
  const uint32_t query_full = ptx::smem_address(&smem.query_full);
  if (tid == 0) {
    if (((q_smem | kv_smem0 | exchange_smem) & 1023) != 0) __trap();  // swizzle atoms need it
    for (int stage = 0; stage < kDuoStages; ++stage) {
      tma::barrier_init(full0 + stage * 8, 1);
      smem.released[stage] = 0;
    }
    for (int g = 0; g < 2; ++g) {
      tma::barrier_init(ptx::smem_address(&smem.exchange_full[g]), kSeesawGroupThreads);
      tma::barrier_init(ptx::smem_address(&smem.exchange_empty[g]), kSeesawGroupThreads);
    }
    tma::barrier_init(query_full, 1);
    tma::fence_barrier_init();
    tma::prefetch_tensor_map(&args.kv_tensor_map);
    tma::prefetch_tensor_map(&args.q_tensor_map);
  }
  ptx::launch_dependents();  // a dependent combine waits for this grid before reading anything
  const uint64_t l2_policy = tma::evict_first_policy();
  // The peer's exchange buffer and barriers of this warpgroup.
  const uint32_t peer_exchange =
      cluster::peer_address(exchange_smem + group * kDuoExchangeBytes, peer);
  const uint32_t peer_full = cluster::peer_address(my_full, peer);
  const uint32_t peer_empty = cluster::peer_address(my_empty, peer);
  const uint8_t* my_exchange = smem.exchange[group];
  __syncthreads();

  const DecodePlanView plan{args.plan, args.params.batch, args.shape.num_parts};
  PartPieceCursor cursor(plan, args.params.seqlens, args.params.max_pages_per_seq, blockIdx.x);
  DecodePiece piece;
  uint32_t pages_before = 0;
  uint32_t pieces_before = 0;
  for (bool more = cursor.first(&piece); more; more = cursor.next(&piece)) {
    const int batch_index = piece.seq;
    const int num_pages = piece.page_end - piece.page_begin;
    const uint32_t base = pages_before;
    if (pieces_before > 0) __syncthreads();  // the previous piece's reads and wgmmas are done

    auto stage_of = [&](int j) { return (base + j) % kDuoStages; };
    auto stage_smem = [&](int j) { return kv_smem0 + stage_of(j) * kDuoStageBytes; };
    auto issue = [&](int j) {
      duo_issue_page(args, stage_smem(j), full0 + stage_of(j) * 8,
                     page_id_of(args, batch_index, piece.page_begin + j), kv_head, rank, l2_policy);
    };
    if (tid == 0) {
      // The query tile: the 4 nope blocks into q, the rope block into exchange[0]; two 64-row
      // boxes a block. Then the piece's first pages.
      const int hpk = args.heads_per_kv;
      tma::arrive_expect_bytes(query_full, kDuoBlocks * kDuoQueryBlockBytes);
#pragma unroll 1
      for (int block = 0; block < kDuoBlocks; ++block) {
        const uint32_t dst = block < 4 ? q_smem + block * kDuoQueryBlockBytes : exchange_smem;
        for (int half = 0; half < 2; ++half) {
          const int row0 = cluster_row0 + half * kSeesawRows;
          tma::load_5d(dst + half * kColumnBlockBytes, &args.q_tensor_map, query_full,
                       duo_global_block(block, rank) * 64, row0 % hpk, kv_head, row0 / hpk,
                       batch_index, l2_policy);
        }
      }
      for (int j = 0; j < kDuoStages && j < num_pages; ++j) issue(j);
    }

    float row_max_run[2], row_sum[2];
    int row_last_key[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max_run[h] = -INFINITY;
      row_sum[h] = 0.f;
      row_last_key[h] = last_visible_key(args, group_row0 + my_rows[h], piece.seqlen);
    }
    // No row of this warpgroup stops before its first row does.
    const int group_last_key = last_visible_key(args, group_row0, piece.seqlen);
    float o_acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o_acc[i] = 0.f;

    // The rope block's k16 steps 2 rank and 2 rank + 1 of this warpgroup's rows, as A fragments.
    tma::wait_parity(query_full, pieces_before & 1);
    uint32_t q_rope[8];
    {
      const uint8_t* rope = smem.exchange[0] + group * kColumnBlockBytes;
#pragma unroll
      for (int step = 0; step < 2; ++step) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = my_rows[i & 1];
          const int chunk = 2 * (2 * static_cast<int>(rank) + step) + (i >> 1);
          q_rope[4 * step + i] = *reinterpret_cast<const uint32_t*>(
              rope + row * 128 + ((chunk ^ (row & 7)) << 4) + (lane & 3) * 4);
        }
      }
    }
    // Both CTAs hold their rope fragments: the exchange buffers may be written (and, on the first
    // piece, the peer's barriers are initialised).
    cluster::sync();

    auto wait_page = [&](int j) {
      const uint32_t c = base + j;
      tma::wait_parity(full0 + (c % kDuoStages) * 8, (c / kDuoStages) & 1);
    };
    auto release = [&](int j) {
      if (lane == 0) {
        __threadfence_block();  // this warp's reads of the stage before the count
        const int before = atomicAdd(&smem.released[stage_of(j)], 1);
        if (before % kWarps == kDuoSlowestRelease && j + kDuoStages < num_pages) {
          __threadfence_block();
          issue(j + kDuoStages);
        }
      }
      __syncwarp();
    };
    // S_own of page j: 16 k16 steps of the nope blocks (Q from shared memory), 2 of the rope (Q
    // from registers); one group. The sequence's last page has its rows past the end zeroed
    // first (both warpgroups write the same zeros; each fences its own).
    auto issue_s = [&](float(&s_acc)[32], int j) {
      wait_page(j);
      const int tokens_valid = piece.seqlen - (piece.page_begin + j) * kPageTokens;
      if (tokens_valid < kPageTokens) {
        duo_zero_page_tail(smem.kv[stage_of(j)], tokens_valid, tid_in_group, kSeesawGroupThreads);
        seesaw_barrier_sync(kSeesawGroupBarrier + group, kSeesawGroupThreads);
      }
      wgmma::fence();
      const uint32_t stage = stage_smem(j);
#pragma unroll
      for (int kk = 0; kk < 16; ++kk) {
        const uint32_t q_offset =
            (kk / 4) * kDuoQueryBlockBytes + group * kColumnBlockBytes + (kk % 4) * 32;
        const uint32_t k_offset = (kk / 4) * kColumnBlockBytes + (kk % 4) * 32;
        wgmma::mma_m64n64k16_bf16(s_acc, wgmma::smem_descriptor(q_smem + q_offset, 0, 1024),
                                  wgmma::smem_descriptor(stage + k_offset, 0, 1024),
                                  kk > 0);  // the first k-step writes S (no zeroing)
      }
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        const uint32_t a[4] = {q_rope[4 * step], q_rope[4 * step + 1], q_rope[4 * step + 2],
                               q_rope[4 * step + 3]};
        const uint32_t k_offset = 4 * kColumnBlockBytes + (2 * static_cast<int>(rank) + step) * 32;
        wgmma::mma_m64n64k16_bf16_a_regs(s_acc, a,
                                         wgmma::smem_descriptor(stage + k_offset, 0, 1024));
      }
      wgmma::commit_group();
    };
    // The own partial S of page j into the peer's buffer, once the peer has read page j − 1's.
    auto send_partial = [&](const float(&s_acc)[32], int j) {
      const uint32_t c = base + j;
      if (c >= 1) cluster::wait_parity(my_empty, (c - 1) & 1);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        cluster::store_v4(peer_exchange + (k * kSeesawGroupThreads + tid_in_group) * 16,
                          s_acc[4 * k], s_acc[4 * k + 1], s_acc[4 * k + 2], s_acc[4 * k + 3]);
      }
      cluster::arrive(peer_full);
    };
    // S = S_own + S_peer of page j; then the peer may write page j + 1's.
    auto add_peer_partial = [&](float(&s_acc)[32], int j) {
      cluster::wait_parity(my_full, (base + j) & 1);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float4 v = *reinterpret_cast<const float4*>(
            my_exchange + (k * kSeesawGroupThreads + tid_in_group) * 16);
        s_acc[4 * k] += v.x;
        s_acc[4 * k + 1] += v.y;
        s_acc[4 * k + 2] += v.z;
        s_acc[4 * k + 3] += v.w;
      }
      cluster::arrive(peer_empty);
    };
    auto pv_registers = [&](int j, const uint32_t(&p_frag)[16]) {
      wgmma::fence();
      const uint32_t stage = stage_smem(j);
#pragma unroll
      for (int ks = 0; ks < kPageTokens / 16; ++ks) {
        const uint32_t a[4] = {p_frag[4 * ks], p_frag[4 * ks + 1], p_frag[4 * ks + 2],
                               p_frag[4 * ks + 3]};
        wgmma::mma_m64n256k16_bf16_a_regs_b_mn_major(
            o_acc, a, wgmma::smem_descriptor(stage + ks * 16 * 128, kColumnBlockBytes, 1024));
      }
      wgmma::commit_group();
    };

    // The warpgroups take turns issuing (named barriers kDuoTurnBarrier + g, 256 threads):
    // warpgroup 0's {P·V_{j-1}, S_j}, then warpgroup 1's, then warpgroup 0's next, ... so that one
    // warpgroup's wgmmas run while the other exchanges and takes its softmax (FlashAttention-3's
    // ping-pong). Event j issues P·V of page j − 1 (kPv) and S of page j (kS), waits for both,
    // releases page j − 1, adds the peer's half of S_j and takes the softmax: P_j in registers for
    // event j + 1, O rescaled. The flags are compile-time so that every wgmma wait sees the same
    // groups on every path (ptxas serializes wgmmas it cannot prove covered).
    float s_acc[32];
    uint32_t p_frag[16];
    auto event = [&](int j, auto pv_flag, auto s_flag) {
      constexpr bool kPv = decltype(pv_flag)::value;
      constexpr bool kS = decltype(s_flag)::value;
      seesaw_barrier_sync(kDuoTurnBarrier + group, kThreads);
      if constexpr (kPv) pv_registers(j - 1, p_frag);
      if constexpr (kS) issue_s(s_acc, j);
      // Warpgroup 1's last event gives no turn: warpgroup 0 has none left to take.
      if (kS || group == 0) seesaw_barrier_arrive(kDuoTurnBarrier + (1 - group), kThreads);
      wgmma::wait_group<0>();
      seesaw_fence_operands(o_acc);
      if constexpr (kPv) release(j - 1);
      if constexpr (kS) {
        seesaw_fence_operands(s_acc);
        send_partial(s_acc, j);
        add_peer_partial(s_acc, j);
        const int page_key0 = (piece.page_begin + j) * kPageTokens;
        const bool mask = page_key0 + kPageTokens - 1 > group_last_key;
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float page_max = mask_row_max_scaled<8>(s_acc, h, page_key0 + 2 * (lane & 3),
                                                        row_last_key[h], mask, args.scale_log2);
          const float new_max = fmaxf(row_max_run[h], page_max);
          const float subtract = new_max == -INFINITY ? 0.f : new_max;
          alpha[h] = ptx::fast_exp2(row_max_run[h] - subtract);
          row_max_run[h] = new_max;
          float sum = 0.f;
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const float p0 = ptx::fast_exp2(fmaf(s_acc[4 * k + 2 * h], args.scale_log2, -subtract));
            const float p1 =
                ptx::fast_exp2(fmaf(s_acc[4 * k + 2 * h + 1], args.scale_log2, -subtract));
            sum += p0 + p1;
            p_frag[2 * k + h] = ptx::pack_bf16x2(p0, p1);
          }
          row_sum[h] = row_sum[h] * alpha[h] + sum;
        }
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
          wgmma::scale_accumulator_rows(o_acc, alpha);
      }
    };
    constexpr std::true_type kYes;
    constexpr std::false_type kNo;
    if (num_pages > 0) {
      if (group == 1) seesaw_barrier_arrive(kDuoTurnBarrier, kThreads);  // warpgroup 0 first
      event(0, kNo, kYes);
      for (int j = 1; j < num_pages; ++j) event(j, kYes, kYes);
      event(num_pages, kYes, kNo);
    }
    pages_before += num_pages;
    ++pieces_before;

    // Epilogue: this warpgroup's rows, this CTA's 256 columns; rank 0 writes the lse.
    const MlaDecodeParams& p = args.params;
    const bool final_output = piece.num_splits == 1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = row_sum[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = group_row0 + my_rows[h];
      const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
      const auto [s, head] = query_row(args, kv_head, r);
      const int col0 = static_cast<int>(rank) * kColsPerGroup + 2 * (lane & 3);
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
            (static_cast<int64_t>(piece.split_index) * p.num_heads_kv + kv_head) *
                args.shape.rows_per_kv_head +
            r;
        float* out_row = args.partial_out + partial_row * kDimV;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          *reinterpret_cast<float2*>(out_row + col0 + 8 * i) =
              make_float2(o_acc[4 * i + 2 * h] * inv_sum, o_acc[4 * i + 2 * h + 1] * inv_sum);
        }
      }
      if (rank == 0 && (lane & 3) == 0)
        write_row_lse(args, piece, kv_head, r, s, head, row_max_run[h], sum);
    }
  }
  // No CTA leaves while its peer may still arrive on its barriers or write its buffers.
  cluster::sync();
}

void launch_splitkv_duo(const DecodeKernelArgs& args, cudaStream_t stream) {
  constexpr int kSmemBytes = sizeof(DuoSharedStorage);
  auto* kernel = &mla_decode_splitkv_duo_kernel;
  MLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid(args.shape.num_parts, args.params.num_heads_kv * args.shape.num_row_tiles);
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = 2;
  attribute.val.clusterDim.z = 1;
  launch_with_attribute(kernel, grid, dim3(kThreads), kSmemBytes, stream, args, attribute);
  MLA_CHECK_LAUNCH("mla_decode_splitkv_duo");
}

}  // namespace mla::kernels::decode
