// Compile-time configuration of the MLA decode kernels (split-KV; the mma.sync body's tile shapes
// and shared memory here, the wgmma bodies' in their own headers).
//
// One CTA of 8 warps owns a tile of 16 query rows of one kv head (the mma.sync body; TileConfig
// also describes 32 and 64) and walks its pieces page by page (a 64-token page is one pipeline
// stage: two for every body). Per page:
//   S = Q·Kᵀ   warps split rows × tokens (kRowGroups × kTokenGroups), fragments via ldmatrix;
//   softmax    online, base 2, row maxima exchanged through shared memory;
//   O += P·V   every warp owns all rows × 64 of the 512 output columns (V = K[:, :512]).
// Shared memory rows are 16-byte chunks XOR-swizzled by (row & 7) so every ldmatrix is
// bank-conflict free (rows are 1152 or 128 bytes, multiples of 128, so unswizzled they conflict).
#pragma once

#include "mla/kernels/mla_decode.h"
#include "mla/kernels/mla_decode_plan.h"

namespace mla::kernels::decode {

inline constexpr int kDimQK = kHeadDimQK;
inline constexpr int kDimV = kHeadDimV;
inline constexpr int kPageTokens = kPageSize;
inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kStages = 2;      // pages in shared memory at once (wgmma bodies)
inline constexpr int kChunkElems = 8;  // bf16 per 16-byte chunk
inline constexpr int kChunksQK = kDimQK / kChunkElems;      // 72 chunks per q / kv row
inline constexpr int kChunksP = kPageTokens / kChunkElems;  // 8 chunks per P row
inline constexpr int kColsPerWarpO = kDimV / kWarps;        // 64 output columns per warp
inline constexpr int kKSteps = kDimQK / 16;                 // 36 k16 steps for S
inline constexpr int kNTilesO = kColsPerWarpO / 8;          // 8 n8 tiles of O per warp
inline constexpr int kCombineRowsPerBlock = 8;              // one warp per row in the combine
inline constexpr int kCombineOneWaveBlocksPerSm = 4;        // its one-wave form: CTAs an SM
inline constexpr int kCombineListChunk = 1024;  // one-wave combine: sequences listed at once
inline constexpr int kPlanThreads = 1024;
inline constexpr int kSliceSplitsPerThread = 8;       // sliced combine: loads in flight per thread
inline constexpr int kSliceSplitsPerThreadLight = 2;  // its light form (sliced_combine_light())
inline constexpr int kSlicedCombineCtasPerSm = 2;     // the full form's occupancy (118 registers)
inline constexpr int kSlicedCombineLightCtasPerSm = 4;  // the light form's (64 registers)
inline constexpr float kLn2 = 0.69314718055994530942f;  // lse = (max₂ + log2 sum) · ln 2

static_assert(kDimQK % 16 == 0 && kDimV % (8 * kWarps) == 0);
static_assert(kChunksQK % 8 == 0, "the (row & 7) swizzle permutes chunks within groups of 8");
static_assert(kChunksP == 8);
static_assert(kPageTokens % 16 == 0);

template <int kRowsPerTile>
struct TileConfig {
  static_assert(kRowsPerTile == 16 || kRowsPerTile == 32 || kRowsPerTile == 64);
  static constexpr int kRows = kRowsPerTile;
  // S-phase warp grid: 16 rows × 8 tokens, 16 × 16 or 32 × 16 per warp.
  static constexpr int kRowGroups = kRowsPerTile == 16 ? 1 : 2;
  static constexpr int kTokenGroups = kWarps / kRowGroups;
  static constexpr int kRowsPerWarpS = kRowsPerTile / kRowGroups;
  static constexpr int kTokensPerWarpS = kPageTokens / kTokenGroups;
  static constexpr int kMTilesS = kRowsPerWarpS / 16;
  static constexpr int kNTilesS = kTokensPerWarpS / 8;
  static constexpr int kMTilesO = kRowsPerTile / 16;
  static_assert(kNTilesS == 1 || kNTilesS == 2);
  static_assert(kRowGroups * kTokenGroups == kWarps);
};

// The phases the 16-row body stamps in a timeline (launch_mla_decode_with_timeline), in order.
enum TimelineSlot : int {
  kTimelineEntry = 0,       // the CTA starts
  kTimelineFirstPiece = 1,  // its first piece is known (the part record), or it has none
  kTimelineQueries = 2,     // the first piece's queries are in registers
  kTimelineFirstPage = 3,   // the first page has landed and every thread saw it
  kTimelinePagesDone = 4,   // the last piece's last page is computed
  kTimelineStored = 5,      // the last piece's output (or partial) is stored
  kTimelineExit = 6,        // the CTA ends (after the fused merge, with kFused)
  kTimelineSlots = 7
};
static_assert(kTimelineSlots == kDecodeTimelineSlots);

// kFast's fused combine: the split pieces a CTA has arrived for and will merge its share of after
// its last piece (at most two: a part's first and last pieces are the only ones that can be split).
struct PendingMerges {
  int count;
  int seq[2];
  int split_index[2];
  int num_splits[2];
  // Arrivals to wait for (thread 0's ticket rounded up to the next launch's start); 0 when this
  // CTA's arrival completed the count (its add acquired every earlier one: no wait).
  int target[2];
};

// Shared memory of one CTA of the mma.sync body, in bytes (one struct, offsets in declaration
// order). Its queries live in registers (staged through a free page stage once per piece), which
// left room for a third page stage, used until the twenty-eighth session: with two, one page in
// flight per SM, every 16-row row of the sweep ran faster (1.8 % geometric mean; the CTAs'
// finish times spread 10 µs instead of 27 at b = 128, 4096: consistent with the hypothesis that
// bytes in flight beyond what covers the latency only queue, and the SMs served last finish last).
inline constexpr int kMmaStages = 2;
template <int kRowsPerTile>
struct SharedStorage {
  uint16_t kv[kMmaStages][kPageTokens * kDimQK];  // per stage: 9 swizzled blocks [64][64] bf16
  uint16_t p[kRowsPerTile * kPageTokens];         // swizzled [rows][64] bf16 probabilities
  float row_partial[TileConfig<kRowsPerTile>::kTokenGroups][kRowsPerTile];  // maxima, then sums
  float row_alpha[kRowsPerTile];              // rescale of O for this page
  float row_max[kRowsPerTile];                // final running max (base-2 scaled)
  alignas(8) uint64_t page_full[kMmaStages];  // TMA completion, one barrier per stage
  PendingMerges pending;                      // the fused combine's split pieces
};
static_assert(sizeof(SharedStorage<16>) <= 227 * 1024, "must fit the sm_90 opt-in limit");
inline constexpr int kPageBytes = kPageTokens * kDimQK * 2;  // 73,728
inline constexpr int kColumnBlockBytes = kPageTokens * 128;  // 64 rows × 64 columns bf16

}  // namespace mla::kernels::decode
