// Tile sizes of the prefill attention kernels, tied together by static_asserts.
//
// One CTA = 4 warps of one span and one head; keys stream through shared memory double-buffered.
// Small: 16 rows per warp (64 a CTA), 64 keys a tile: Q 24 KiB + 2 × (K 24 + V 16) = 104 KiB.
// Large: 32 rows per warp (128 a CTA), 32 keys a tile, so each K/V fragment read from shared
// memory feeds two mma tiles: Q 48 KiB + 2 × (K 12 + V 8) = 88 KiB. Both fit twice on an SM.
#pragma once

#include "mla/kernels/prefill_attention.h"

namespace mla::kernels::prefill {

constexpr int kHeadDimQK = kPrefillHeadDimQK;  // 128 nope + 64 rope
constexpr int kHeadDimV = kPrefillHeadDimV;
constexpr int kRowsPerWarp = 16;  // mma.sync m16n8k16: M
constexpr int kMmaK = 16;
constexpr int kMmaN = 8;
constexpr int kChunkElems = 8;                       // one 16-byte cp.async / ldmatrix row = 8 bf16
constexpr int kChunksQK = kHeadDimQK / kChunkElems;  // 24 per Q/K row
constexpr int kChunksV = kHeadDimV / kChunkElems;    // 16 per V row
constexpr int kSwizzleChunks = 8;                    // XOR swizzle period (128 bytes)
constexpr int kStages = 2;

constexpr int kSmemPerSm = 227 * 1024;

// The uncovered-row fill kernel: rows per block (one 64-bit coverage mask) and threads.
constexpr int kFillRows = 64;
constexpr int kFillThreads = 256;

static_assert(kHeadDimQK % kMmaK == 0 && kHeadDimV % (2 * kMmaN) == 0,
              "head dims must split into mma k-steps and pairs of n-tiles (ldmatrix x4)");
static_assert(kChunksQK % kSwizzleChunks == 0 && kChunksV % kSwizzleChunks == 0,
              "rows must be whole swizzle periods");
static_assert(kFillRows == 64, "the fill kernel's coverage mask is one 64-bit word");

// The span kernel's CTA shape: kWarps warps of kMTilesPerWarp 16-row mma tiles each (a K or V
// fragment read from shared memory serves every tile of the warp), keys kBlockN at a time.
template <int kWarps_, int kMTilesPerWarp_, int kBlockN_>
struct TileShape {
  static constexpr int kWarps = kWarps_;
  static constexpr int kMTilesPerWarp = kMTilesPerWarp_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kWarps * kMTilesPerWarp * kRowsPerWarp;
  static constexpr int kSmemQElems = kBlockM * kHeadDimQK;
  static constexpr int kSmemKElems = kBlockN * kHeadDimQK;
  static constexpr int kSmemVElems = kBlockN * kHeadDimV;
  static constexpr int kSmemBytes = 2 * (kSmemQElems + kStages * (kSmemKElems + kSmemVElems));
  static constexpr int kMinBlocksPerSm = kSmemBytes <= kSmemPerSm / 2 ? 2 : 1;
  static_assert(kBlockN % (2 * kMmaN) == 0 && kBlockN % kMmaK == 0,
                "a key tile is whole pairs of S n-tiles and whole P·V k-steps");
  static_assert((kBlockM * kChunksQK) % kThreads == 0 && (kBlockN * kChunksQK) % kThreads == 0 &&
                    (kBlockN * kChunksV) % kThreads == 0,
                "tile loads divide evenly over the threads");
  static_assert(kSmemBytes <= kSmemPerSm, "the CTA's shared memory must fit on an SM");
};
using SmallTile = TileShape<4, 1, 64>;  // 64 rows, 64 keys a tile, two CTAs per SM
using LargeTile = TileShape<4, 2, 32>;  // 128 rows (32 per warp), 32 keys a tile, two CTAs per SM
static_assert(SmallTile::kMinBlocksPerSm == 2 && LargeTile::kMinBlocksPerSm == 2,
              "both shapes are sized for two CTAs per SM");

}  // namespace mla::kernels::prefill
