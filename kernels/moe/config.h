// Tile sizes of the MoE kernels, and the facts that tie them together.
//
// The grouped GEMMs run C[rows, n] = A[rows, k] · B[n, k]ᵀ with both operands k-contiguous (x or
// the activation rows; the checkpoint's [out, in] weight rows), on mma.sync m16n8k16. A CTA owns
// one (expert, 32-row tile, n tile); its warps split the n tile and each covers all 32 rows, so a
// tile of at most 16 rows (decode) skips the second m16 half of every mma.
#pragma once

#include "mla/kernels/moe_plan.h"

namespace mla::kernels::moe {

inline constexpr int kGemmRows = kMoeRowsPerTile;  // BM
inline constexpr int kGemmK = 64;                  // k per pipeline stage: 128 bytes of bf16
inline constexpr int kGemmStages = 4;              // cp.async ring: 3 stages in flight
static_assert(kGemmRows == 32, "the warps cover the row tile as two m16 halves");
static_assert(kGemmK == 64, "a smem row is 8 chunks of 16 bytes: the XOR swizzle uses row & 7");

// One CTA shape per warp count: each warp owns 16 B (weight) rows, two n8 mma tiles. gate/up: the
// B rows are 8·warps gate rows and the same 8·warps up rows, so silu(gate)·up happens in
// registers; down: 16·warps output columns. 4 warps (64 B rows, 48 KB ring, 4 CTAs per SM) by
// default; 2 warps when the wide tiles would leave SMs with fewer than 4 CTAs (decode of 1-2
// tokens on V2-Lite), since each CTA streams its weights at a latency-bound rate.
template <int kWarps>
struct GemmConfig {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBRows = 16 * kWarps;
  static constexpr int kGateUpColumns = kBRows / 2;
  static constexpr int kDownColumns = kBRows;
  static constexpr int kLoadRowsPerPass = kThreads / (kGemmK / 8);  // 16-byte chunks per row: 8
  static constexpr int kAPasses = kGemmRows / kLoadRowsPerPass;
  static constexpr int kBPasses = kBRows / kLoadRowsPerPass;
  static constexpr int kStageBytes = (kGemmRows + kBRows) * kGemmK * 2;
  static constexpr int kSmemBytes = kGemmStages * kStageBytes;
  static_assert(kAPasses * kLoadRowsPerPass == kGemmRows && kBPasses == 4, "whole load passes");
  static_assert(kSmemBytes <= 48 * 1024, "at least four CTAs per SM");
};
inline constexpr int kWideWarps = 4, kNarrowWarps = 2;
inline constexpr int kMinCtasForWideTiles = 512;  // ≈ 4 per SM on an H100/H200

inline constexpr int kRouteWarpsPerBlock = 2;  // one token per warp; small blocks spread over SMs
inline constexpr int kPlanThreads = 512;
inline constexpr int kPlanWarps = kPlanThreads / 32;
inline constexpr int kUnpermuteThreads = 256;
static_assert(kPlanThreads >= kMoeMaxExperts, "one plan thread per expert");
static_assert(kMoeMaxTopK <= 32, "one router lane per chosen expert");

}  // namespace mla::kernels::moe
