// Tile sizes of the MoE kernels, and the facts that tie them together.
//
// The grouped GEMMs run C[rows, n] = A[rows, k] · B[n, k]ᵀ with both operands k-contiguous (x or
// the activation rows; the checkpoint's [out, in] weight rows), on mma.sync m16n8k16. A CTA owns
// one (expert, 32-row tile, n tile); its 4 warps split the n tile and each covers all 32 rows, so a
// tile of at most 16 rows (decode) skips the second m16 half of every mma.
#pragma once

#include "mla/kernels/moe_plan.h"

namespace mla::kernels::moe {

inline constexpr int kGemmRows = kMoeRowsPerTile;  // BM
inline constexpr int kGemmBRows = 64;              // B rows (weight rows) per CTA tile
inline constexpr int kGemmK = 64;                  // k per pipeline stage: 128 bytes of bf16
inline constexpr int kGemmStages = 4;              // cp.async ring: 3 stages (36 KB) in flight
inline constexpr int kGemmWarps = 4;
inline constexpr int kGemmThreads = 32 * kGemmWarps;
// gate/up: the 64 B rows are 32 gate rows and the same 32 up rows, so silu(gate)·up happens in
// registers; down: 64 output columns.
inline constexpr int kGateUpColumns = kGemmBRows / 2;
inline constexpr int kDownColumns = kGemmBRows;

static_assert(kGemmRows == 32, "the warps cover the row tile as two m16 halves");
static_assert(kGemmK == 64, "a smem row is 8 chunks of 16 bytes: the XOR swizzle uses row & 7");
static_assert(kGemmBRows == 16 * kGemmWarps, "each warp owns 16 B rows (two n8 mma tiles)");
static_assert(kGemmThreads * 2 == kGemmRows * kGemmK / 8, "two 16-byte A chunks per thread");
static_assert(kGemmThreads * 4 == kGemmBRows * kGemmK / 8, "four 16-byte B chunks per thread");
// The ring, in dynamic shared memory: 48 KB, four CTAs per SM. Measured on an H200 (V2-Lite and
// V3 shapes, 1..4096 tokens): 6 or 8 stages, 2-warp tiles (more CTAs per SM), a per-CTA rotation of
// the k order and PDL-free launches all change decode by ≤ 3%; 6-8 stages lose 15-30% at prefill.
inline constexpr int kGemmStageBytes = (kGemmRows + kGemmBRows) * kGemmK * 2;
inline constexpr int kGemmSmemBytes = kGemmStages * kGemmStageBytes;
static_assert(4 * kGemmSmemBytes <= 227 * 1024, "four CTAs per SM");

inline constexpr int kRouteWarpsPerBlock = 2;  // one token per warp; small blocks spread over SMs
inline constexpr int kPlanThreads = 512;
inline constexpr int kPlanWarps = kPlanThreads / 32;
inline constexpr int kUnpermuteThreads = 256;
static_assert(kPlanThreads >= kMoeMaxExperts, "one plan thread per expert");
static_assert(kMoeMaxTopK <= 32, "one router lane per chosen expert");

}  // namespace mla::kernels::moe
