// Tile sizes of the prefill attention kernels, tied together by static_asserts.
//
// One CTA = 4 warps = 64 query rows (16 per warp, the mma.sync M) of one span and one head; keys
// stream through in 64-row tiles, double-buffered. Shared memory: Q 24 KiB + 2 × (K 24 KiB +
// V 16 KiB) = 104 KiB, so two CTAs fit on an SM (227 KiB).
#pragma once

#include "mla/kernels/prefill_attention.h"

namespace mla::kernels::prefill {

constexpr int kHeadDimQK = kPrefillHeadDimQK;  // 128 nope + 64 rope
constexpr int kHeadDimV = kPrefillHeadDimV;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 16;  // mma.sync m16n8k16: M
constexpr int kBlockM = kWarps * kRowsPerWarp;
constexpr int kBlockN = 64;  // keys per tile
constexpr int kMmaK = 16;
constexpr int kMmaN = 8;
constexpr int kChunkElems = 8;                       // one 16-byte cp.async / ldmatrix row = 8 bf16
constexpr int kChunksQK = kHeadDimQK / kChunkElems;  // 24 per Q/K row
constexpr int kChunksV = kHeadDimV / kChunkElems;    // 16 per V row
constexpr int kSwizzleChunks = 8;                    // XOR swizzle period (128 bytes)
constexpr int kStages = 2;

constexpr int kSmemQElems = kBlockM * kHeadDimQK;
constexpr int kSmemKElems = kBlockN * kHeadDimQK;
constexpr int kSmemVElems = kBlockN * kHeadDimV;
constexpr int kSmemBytes = 2 * (kSmemQElems + kStages * (kSmemKElems + kSmemVElems));

// The uncovered-row fill kernel: rows per block (one 64-bit coverage mask) and threads.
constexpr int kFillRows = 64;
constexpr int kFillThreads = 256;

static_assert(kHeadDimQK % kMmaK == 0 && kHeadDimV % (2 * kMmaN) == 0,
              "head dims must split into mma k-steps and pairs of n-tiles (ldmatrix x4)");
static_assert(kBlockN % (2 * kMmaN) == 0 && kBlockN % kMmaK == 0,
              "a key tile is whole pairs of S n-tiles and whole P·V k-steps");
static_assert(kChunksQK % kSwizzleChunks == 0 && kChunksV % kSwizzleChunks == 0,
              "rows must be whole swizzle periods");
static_assert((kBlockM * kChunksQK) % kThreads == 0 && (kBlockN * kChunksQK) % kThreads == 0 &&
                  (kBlockN * kChunksV) % kThreads == 0,
              "tile loads divide evenly over the threads");
static_assert(kSmemBytes <= 113 * 1024, "two CTAs per SM need <= 113 KiB each");
static_assert(kFillRows == 64, "the fill kernel's coverage mask is one 64-bit word");

}  // namespace mla::kernels::prefill
