// Device code of the prefill attention: the span kernel (FlashAttention-2 style) and the fill of
// rows no span covers. Included only by prefill_attention.cu.
//
// Fragment layouts are mma.sync m16n8k16's: a thread (lane = 4·g + t) holds S/O accumulators of
// rows g and g + 8 at columns 2t, 2t + 1 of each 8-wide n-tile, and two adjacent S n-tiles are
// exactly one A fragment of P·V (FA2's register reuse). Shared memory rows are 16-byte chunks
// XOR-swizzled within 128-byte periods (chunk ^ row % 8), so the 8 row addresses of an ldmatrix
// hit 8 different bank groups although a 384-byte Q/K row is a multiple of 128 bytes. The subtle
// part is the empty row: the running max stays -inf, exponentials are taken against 0 instead
// (2^-inf = 0, never -inf - -inf), and the epilogue turns a zero sum into out 0, lse -inf.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/ptx.cuh"
#include "mla/kernels/prefill_attention.h"
#include "prefill_attention/config.h"

namespace mla::kernels::prefill {

constexpr float kLog2e = 1.4426950408889634f;

// Index (in 16-byte chunks) of logical chunk `chunk` of tile row `row`.
__device__ __forceinline__ int swizzled_chunk(int row, int chunk, int chunks_per_row) {
  return row * chunks_per_row +
         ((chunk & ~(kSwizzleChunks - 1)) | ((chunk ^ row) & (kSwizzleChunks - 1)));
}

// Byte offset of logical chunk `chunk` (a compile-time value once unrolled) in a tile row whose
// swizzle is already folded into the lane constant `lane_xor` = (lane's chunk offset) ^ (row % 8).
__device__ __forceinline__ uint32_t swizzled_offset(int row_bytes, int chunk_base, int lane_xor) {
  return row_bytes +
         ((chunk_base & ~(kSwizzleChunks - 1)) + ((chunk_base & (kSwizzleChunks - 1)) ^ lane_xor)) *
             16;
}

// cp.async of a [kRows, kChunks · 8] tile: row r from g_rows + r · row_stride; rows >= valid_rows
// are zero-filled without a read (the source operand is then `g_fallback`, any valid pointer).
template <int kRows, int kChunks, int kThreads>
__device__ __forceinline__ void load_tile(uint32_t s_tile, const __nv_bfloat16* g_rows,
                                          int64_t row_stride, int valid_rows,
                                          const __nv_bfloat16* g_fallback, int tid) {
  constexpr int kPerThread = kRows * kChunks / kThreads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = tid + i * kThreads;
    const int row = index / kChunks;
    const int chunk = index % kChunks;
    const bool valid = row < valid_rows;
    const __nv_bfloat16* src = valid ? g_rows + row * row_stride + chunk * kChunkElems : g_fallback;
    ptx::cp_async_16(s_tile + swizzled_chunk(row, chunk, kChunks) * 16, src, valid ? 16 : 0);
  }
}

template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocksPerSm)
    prefill_attention_kernel(const __grid_constant__ PrefillAttentionParams p) {
  constexpr int kBlockM = Tile::kBlockM;
  constexpr int kBlockN = Tile::kBlockN;
  constexpr int kThreads = Tile::kThreads;
  constexpr int kMTiles = Tile::kMTilesPerWarp;  // 16-row mma tiles per warp
  const AttentionSpanDevice span = p.spans[blockIdx.y];
  // Reversed so that the heaviest causal tiles (the last rows) start first.
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  if (m0 >= span.q_count) return;
  const int head = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  extern __shared__ __align__(128) uint8_t smem[];
  constexpr uint32_t kStageBytesK = Tile::kSmemKElems * 2;
  constexpr uint32_t kStageBytesV = Tile::kSmemVElems * 2;
  const uint32_t s_q = ptx::smem_address(smem);       // [kBlockM, 192] swizzled
  const uint32_t s_k = s_q + Tile::kSmemQElems * 2;   // [kStages][kBlockN, 192]
  const uint32_t s_v = s_k + kStages * kStageBytesK;  // [kStages][kBlockN, 128]

  const auto* q = reinterpret_cast<const __nv_bfloat16*>(p.q);
  const auto* k = reinterpret_cast<const __nv_bfloat16*>(p.k);
  const auto* v = reinterpret_cast<const __nv_bfloat16*>(p.v);
  const __nv_bfloat16* g_q =
      q + (int64_t(span.q_begin) + m0) * p.q_row_stride + int64_t(head) * p.q_head_stride;
  const __nv_bfloat16* g_k =
      k + int64_t(span.k_begin) * p.k_row_stride + int64_t(head) * p.k_head_stride;
  const __nv_bfloat16* g_v =
      v + int64_t(span.k_begin) * p.v_row_stride + int64_t(head) * p.v_head_stride;

  // Causal, bottom-right aligned: span row i sees keys [0, i + causal_shift].
  const int causal_shift = span.k_count - span.q_count;
  int n_end = span.k_count;
  if (span.causal) n_end = min(n_end, causal_shift + m0 + kBlockM);
  const int n_tiles = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;

  if (n_tiles > 0) {
    load_tile<kBlockM, kChunksQK, kThreads>(s_q, g_q, p.q_row_stride,
                                            min(kBlockM, span.q_count - m0), q, tid);
    load_tile<kBlockN, kChunksQK, kThreads>(s_k, g_k, p.k_row_stride, min(kBlockN, span.k_count), k,
                                            tid);
    load_tile<kBlockN, kChunksV, kThreads>(s_v, g_v, p.v_row_stride, min(kBlockN, span.k_count), v,
                                           tid);
  }
  ptx::cp_async_commit();

  constexpr int kQkSteps = kHeadDimQK / kMmaK;  // 12
  constexpr int kSTiles = kBlockN / kMmaN;
  constexpr int kOTiles = kHeadDimV / kMmaN;  // 16
  constexpr int kPvSteps = kBlockN / kMmaK;
  constexpr float kNegInf = -__builtin_huge_valf();

  float r_o[kMTiles][kOTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < kOTiles; ++i)
      r_o[mt][i][0] = r_o[mt][i][1] = r_o[mt][i][2] = r_o[mt][i][3] = 0.f;
  // Per mma tile and per row half (rows g, g + 8): the running max of the raw scores q·k and this
  // thread's part of Σ 2^((s − row_max) · scale · log2 e).
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    row_max[mt][0] = row_max[mt][1] = kNegInf;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  const float scale_log2 = p.softmax_scale * kLog2e;
  const int warp_row0 = m0 + warp * kMTiles * kRowsPerWarp;  // span-relative
  // ldmatrix lane roles (see swizzled_offset): Q as A (rows by lane % 16, chunk + lane / 16), K as
  // B (key by lane % 8 + (lane / 16) · 8, chunk + (lane / 8) % 2), V as B transposed (key by
  // lane % 16, chunk + lane / 16). Every such row is ≡ lane % 8 (mod 8).
  const int q_lane_row_bytes = (warp * kMTiles * kRowsPerWarp + lane % 16) * kChunksQK * 16;
  const int q_lane_xor = (lane / 16) ^ (lane % 8);
  const int k_lane_row_bytes = (lane % 8 + (lane / 16) * 8) * kChunksQK * 16;
  const int k_lane_xor = ((lane / 8) % 2) ^ (lane % 8);
  const int v_lane_row_bytes = (lane % 16) * kChunksV * 16;
  const int v_lane_xor = (lane / 16) ^ (lane % 8);

  for (int tile = 0; tile < n_tiles; ++tile) {
    ptx::cp_async_wait_group<0>();
    __syncthreads();  // tile landed for all; every warp is done with the other stage
    if (tile + 1 < n_tiles) {
      const int next = (tile + 1) * kBlockN;
      const int stage = (tile + 1) % kStages;
      load_tile<kBlockN, kChunksQK, kThreads>(s_k + stage * kStageBytesK,
                                              g_k + next * p.k_row_stride, p.k_row_stride,
                                              min(kBlockN, span.k_count - next), k, tid);
      load_tile<kBlockN, kChunksV, kThreads>(s_v + stage * kStageBytesV,
                                             g_v + next * p.v_row_stride, p.v_row_stride,
                                             min(kBlockN, span.k_count - next), v, tid);
    }
    ptx::cp_async_commit();
    const uint32_t s_k_tile = s_k + (tile % kStages) * kStageBytesK;
    const uint32_t s_v_tile = s_v + (tile % kStages) * kStageBytesV;
    const int n0 = tile * kBlockN;

    // S = Q · Kᵀ for this warp's rows and the tile's keys; each K fragment serves kMTiles tiles.
    float r_s[kMTiles][kSTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int i = 0; i < kSTiles; ++i)
        r_s[mt][i][0] = r_s[mt][i][1] = r_s[mt][i][2] = r_s[mt][i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kQkSteps; ++ks) {
      // Q stays in shared memory (192 columns in registers would spill): ldmatrix per k-step.
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        ptx::ldmatrix_x4(a[mt], s_q + mt * kRowsPerWarp * kChunksQK * 16 +
                                    swizzled_offset(q_lane_row_bytes, ks * 2, q_lane_xor));
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        uint32_t b[4];
        ptx::ldmatrix_x4(b, s_k_tile + np * 2 * kMmaN * kChunksQK * 16 +
                                swizzled_offset(k_lane_row_bytes, ks * 2, k_lane_xor));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          ptx::mma_bf16_16816(r_s[mt][2 * np], a[mt], b[0], b[1]);
          ptx::mma_bf16_16816(r_s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Mask keys past the span and, causally, past each row's last key (raw scores: the scale is
    // positive, so maxima commute with it and it is folded into the exponent's FFMA below).
    const bool need_mask =
        n0 + kBlockN > span.k_count || (span.causal && n0 + kBlockN > causal_shift + m0 + 1);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + nt * kMmaN + 2 * (lane % 4) + (e & 1);
            const int row = warp_row0 + mt * kRowsPerWarp + lane / 4 + (e / 2) * 8;
            const int limit =
                span.causal ? min(span.k_count, row + causal_shift + 1) : span.k_count;
            if (key >= limit) r_s[mt][nt][e] = kNegInf;
          }
        }
      }
    }

    // Online softmax: new max per row (over the quad holding the row), rescale, exponentiate.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float tile_max = kNegInf;
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
          tile_max = fmaxf(tile_max, fmaxf(r_s[mt][nt][2 * r], r_s[mt][nt][2 * r + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[mt][r], tile_max);
        // In log2 units; a row with no key yet takes 0 (2^-inf = 0, never -inf - -inf).
        const float base = new_max == kNegInf ? 0.f : new_max * scale_log2;
        const float alpha = ptx::fast_exp2(row_max[mt][r] * scale_log2 - base);
        row_max[mt][r] = new_max;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt) {
          r_s[mt][nt][2 * r] = ptx::fast_exp2(fmaf(r_s[mt][nt][2 * r], scale_log2, -base));
          r_s[mt][nt][2 * r + 1] = ptx::fast_exp2(fmaf(r_s[mt][nt][2 * r + 1], scale_log2, -base));
          sum += r_s[mt][nt][2 * r] + r_s[mt][nt][2 * r + 1];
        }
        row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < kOTiles; ++dt) {
          r_o[mt][dt][2 * r] *= alpha;
          r_o[mt][dt][2 * r + 1] *= alpha;
        }
      }
    }

    // O += P · V: P (bf16) straight from the S accumulators, V through ldmatrix.trans; each V
    // fragment serves kMTiles tiles.
#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        a[mt][0] = ptx::pack_bf16x2(r_s[mt][2 * kk][0], r_s[mt][2 * kk][1]);
        a[mt][1] = ptx::pack_bf16x2(r_s[mt][2 * kk][2], r_s[mt][2 * kk][3]);
        a[mt][2] = ptx::pack_bf16x2(r_s[mt][2 * kk + 1][0], r_s[mt][2 * kk + 1][1]);
        a[mt][3] = ptx::pack_bf16x2(r_s[mt][2 * kk + 1][2], r_s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kOTiles / 2; ++dp) {
        uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, s_v_tile + kk * kMmaK * kChunksV * 16 +
                                      swizzled_offset(v_lane_row_bytes, dp * 2, v_lane_xor));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          ptx::mma_bf16_16816(r_o[mt][2 * dp], a[mt], b[0], b[1]);
          ptx::mma_bf16_16816(r_o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
  ptx::cp_async_wait_all();

  // Epilogue: finish the row sums over the quad, normalise, write bf16 out and the natural LSE.
  auto* out = reinterpret_cast<__nv_bfloat16*>(p.out);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = warp_row0 + mt * kRowsPerWarp + lane / 4 + r * 8;
      if (row >= span.q_count) continue;
      const int64_t q_row = int64_t(span.q_begin) + row;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      __nv_bfloat16* g_o = out + q_row * p.out_row_stride + int64_t(head) * p.out_head_stride;
#pragma unroll
      for (int dt = 0; dt < kOTiles; ++dt) {
        *reinterpret_cast<uint32_t*>(g_o + dt * kMmaN + 2 * (lane % 4)) =
            ptx::pack_bf16x2(r_o[mt][dt][2 * r] * inv, r_o[mt][dt][2 * r + 1] * inv);
      }
      if (lane % 4 == 0)
        p.lse[q_row * p.lse_row_stride + head] =
            sum > 0.f ? row_max[mt][r] * p.softmax_scale + logf(sum) : kNegInf;
    }
  }
}

// Writes out = 0, lse = -inf on the rows of one 64-row block that no span covers. Each block
// scans every span (they are few next to the rows) into a 64-bit coverage mask.
__global__ void __launch_bounds__(kFillThreads)
    prefill_fill_uncovered_kernel(const __grid_constant__ PrefillAttentionParams p) {
  __shared__ unsigned long long s_covered;
  const int64_t r0 = int64_t(blockIdx.x) * kFillRows;
  if (threadIdx.x == 0) s_covered = 0ull;
  __syncthreads();
  for (int s = threadIdx.x; s < p.num_spans; s += kFillThreads) {
    const AttentionSpanDevice span = p.spans[s];
    const int64_t lo = max(int64_t(span.q_begin), r0);
    const int64_t hi = min(int64_t(span.q_begin) + span.q_count, r0 + kFillRows);
    if (lo < hi) {
      const int width = int(hi - lo);
      const unsigned long long bits = width == 64 ? ~0ull : (1ull << width) - 1ull;
      atomicOr(&s_covered, bits << int(lo - r0));
    }
  }
  __syncthreads();
  const unsigned long long covered = s_covered;
  if (covered == ~0ull) return;
  const int rows = int(min(int64_t(kFillRows), p.num_q_rows - r0));
  const int chunks_per_row = p.num_heads * kChunksV;
  auto* out = reinterpret_cast<__nv_bfloat16*>(p.out);
  for (int i = threadIdx.x; i < rows * chunks_per_row; i += kFillThreads) {
    const int r = i / chunks_per_row;
    if ((covered >> r) & 1ull) continue;
    const int head = (i % chunks_per_row) / kChunksV;
    const int chunk = i % kChunksV;
    *reinterpret_cast<uint4*>(out + (r0 + r) * p.out_row_stride +
                              int64_t(head) * p.out_head_stride + chunk * kChunkElems) =
        make_uint4(0u, 0u, 0u, 0u);
  }
  for (int i = threadIdx.x; i < rows * p.num_heads; i += kFillThreads) {
    const int r = i / p.num_heads;
    if ((covered >> r) & 1ull) continue;
    p.lse[(r0 + r) * p.lse_row_stride + i % p.num_heads] = -__builtin_huge_valf();
  }
}

}  // namespace mla::kernels::prefill
