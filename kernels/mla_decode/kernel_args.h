// Arguments every MLA decode kernel receives (built once per launch by the host dispatcher).
#pragma once

#include <cuda.h>

#include <algorithm>

#include "mla/kernels/mla_decode.h"
#include "mla_decode/config.h"

namespace mla::kernels::decode {

struct DecodeKernelArgs {
  MlaDecodeParams params;
  DecodeLaunchShape shape;
  int heads_per_kv = 0;           // h_q / h_kv
  int max_splits = 0;             // rows of the partial buffers
  float scale_log2 = 0.f;         // softmax_scale · log2(e): scores are exponentiated in base 2
  const int32_t* plan = nullptr;  // [decode_plan_ints(b, num_parts)] int32, in the workspace
  float* partial_lse = nullptr;   // [max_splits, h_kv, rows_per_kv_head] fp32 (natural log)
  float* partial_out = nullptr;   // [max_splits, h_kv, rows_per_kv_head, 512] fp32 (normalised)
  // kFast's arrival counters of the fused combine, zeroed by the plan kernel; each fused launch
  // adds a sequence's number of pieces: [b, h_kv, num_row_tiles] int32, in the workspace.
  int* combine_counters = nullptr;
  // The cache as a 4-D TMA map {576, 64 tokens, num_pages, h_kv}, boxes of 64 × 64 with the
  // 128-byte swizzle (one box = one 64-column block of a page).
  CUtensorMap kv_tensor_map = {};
  // Diagnostics (launch_mla_decode_with_timeline): per CTA, kTimelineSlots global-timer stamps
  // (ns) then kTimelineSlots clock64 stamps; the 16-row body and kFast's seesaw (pairs or P·V
  // first, launched combine) record. Null otherwise.
  uint64_t* timeline = nullptr;
  // The same launch's combine: per combine CTA, kDecodeCombineTimelineSlots global-timer stamps
  // (the combine's timeline instantiations record). Null otherwise.
  uint64_t* combine_timeline = nullptr;
  // Diagnostics (launch_mla_decode_with_pair_trace): kDecodePairTraceWords clock64 values per CTA,
  // of its piece number pair_trace_piece; only the seesaw's traced pairs instantiation records.
  // Null otherwise.
  uint64_t* pair_trace = nullptr;
  int pair_trace_piece = 0;
  // kFast's seesaw: the query tile by the TMA engine (query_tile_tma_applies()) instead of 18
  // cp.async per thread. The queries as a 5-D map {576, h_q / h_kv, h_kv, s_q, b}, a box of 64
  // columns × 64 rows (min(h_q / h_kv, 64) heads × as many query positions as make 64 rows), the
  // 128-byte swizzle: one box is one 64-column block of the tile, rows past the tensor zero-filled.
  // Last, so that the other kernels' arguments do not move.
  bool query_by_tma = false;
  CUtensorMap q_tensor_map = {};
  // kFast's seesaw with the launched combine: the grid as {tiles, parts} instead of {parts,
  // tiles}, so that a part's row tiles (which read the same pages) are launched consecutively
  // (FlashMLA's order). Never with the fused combine, whose merge takes blockIdx.x as the part.
  bool tile_major_grid = false;
  // kFast's seesaw pairs order: the cache as a 5-D map {64 columns, 64 tokens, 9 column blocks,
  // num_pages, h_kv} (the blocks' stride 128 bytes), a box of 4 column blocks: one copy fills
  // four consecutive 8 KB blocks of a stage (a half of a page without its rope block). Made only
  // for a launch that runs the pairs order.
  CUtensorMap kv_half_tensor_map = {};
};

// Whether a 64-row tile of a kv head's query rows (query position s, head i of the kv head's
// heads_per_kv, i fastest) is one box of that map: heads_per_kv a multiple of 64, or a divisor of
// it.
MLA_HOST_DEVICE bool query_tile_tma_applies(int heads_per_kv) {
  return heads_per_kv > 0 && (heads_per_kv % 64 == 0 || 64 % heads_per_kv == 0);
}

// Row tile `tile_index` of a split-KV grid (kv head major: a kv head's tiles are consecutive)
// with kRowsPerTile rows: its kv head and its first row in that kv head.
struct RowTile {
  int kv_head;
  int row0;
};
// (Index: the caller's type, int or blockIdx's unsigned, so the division is the one it had.)
template <int kRowsPerTile, typename Index>
MLA_HOST_DEVICE RowTile row_tile(const DecodeKernelArgs& args, Index tile_index) {
  return {static_cast<int>(tile_index / args.shape.num_row_tiles),
          static_cast<int>((tile_index % args.shape.num_row_tiles) * kRowsPerTile)};
}

// Row r of kv head `kv_head` (rows are (query position, head) pairs, head fastest) and what it may
// see. Shared by the split-KV bodies and the combines so they agree on the mapping.
struct QueryRow {
  int s;     // query position, 0..s_q-1
  int head;  // query head, 0..h_q-1
};
MLA_HOST_DEVICE QueryRow query_row(const DecodeKernelArgs& args, int kv_head, int r) {
  return {r / args.heads_per_kv, kv_head * args.heads_per_kv + r % args.heads_per_kv};
}
// The last key a row may see in a sequence of `seqlen` keys (causal: query s of s_q sees keys up
// to seqlen - s_q + s); -1 for padding rows past the kv head's last row.
MLA_HOST_DEVICE int last_visible_key(const DecodeKernelArgs& args, int r, int seqlen) {
  if (r >= args.shape.rows_per_kv_head) return -1;
  const int s = r / args.heads_per_kv;
  return seqlen - 1 - (args.params.causal ? args.params.seqlen_q - 1 - s : 0);
}

// How the launched combine runs: one warp per row (kBaseline), the same as a programmatic
// dependent of the split-KV grid, kFast's one-wave form of it (warps striding over the rows of the
// sequences that need a merge; also dependent), or kFast's sliced kernel for small batches (also
// dependent; a CTA per row and column slice).
enum class DecodeCombineLaunch { kPerRow, kPerRowDependent, kOneWaveDependent, kSliced };

// The sliced combine's column slices (1, 2, 4 or 8): the fewest that give the grid at least one
// CTA per SM (rows_in_batch = b · h_kv · rows per kv head).
MLA_HOST_DEVICE int sliced_combine_slices(int64_t rows_in_batch, int num_sms) {
  int slices = 1;
  while (slices < 8 && rows_in_batch * slices < num_sms) slices *= 2;
  return slices;
}

// The launched combine's grid: {row blocks, or rows × column slices (the sliced combine's
// `slices`; 1 otherwise), b}; the one-wave form's {row blocks of the whole batch, at most
// kCombineOneWaveBlocksPerSm a SM, 1}.
struct CombineGrid {
  int64_t x = 0, y = 0;
  int slices = 1;
};
inline CombineGrid combine_grid(const MlaDecodeParams& params, const DecodeLaunchShape& shape,
                                DecodeCombineLaunch how) {
  const int64_t rows = int64_t(params.num_heads_kv) * shape.rows_per_kv_head;
  if (how == DecodeCombineLaunch::kSliced) {
    const int slices = sliced_combine_slices(int64_t(params.batch) * rows, params.num_sms);
    return {rows * slices, params.batch, slices};
  }
  if (how == DecodeCombineLaunch::kOneWaveDependent) {
    const int64_t blocks =
        (int64_t(params.batch) * rows + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock;
    return {std::max<int64_t>(
                1, std::min<int64_t>(blocks, int64_t(params.num_sms) * kCombineOneWaveBlocksPerSm)),
            1};
  }
  return {(rows + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock, params.batch};
}

// Whether the sliced combine runs its light form (kSliceSplitsPerThreadLight loads in flight per
// thread, four CTAs an SM): for a grid of more CTAs than the full form's two an SM hold at once
// (b = 32, h_q = 16: 512 CTAs, two waves), unless MLA_DECODE_SLICED_LIGHT=0 (for measuring).
bool sliced_combine_light(const CombineGrid& grid, int num_sms);

// Launcher of the combine kernels (plan_and_combine.cu); args.combine_timeline set: the
// instantiations that stamp (the same code otherwise).
void launch_combine_kernel(const DecodeKernelArgs& args, DecodeCombineLaunch how,
                           cudaStream_t stream);

// Launchers of the split-KV kernel, one explicit instantiation per tile height
// (instantiations/rows16.cu). fused_combine: the kernel merges split sequences itself (kFast,
// fused_combine.cuh) and no combine kernel follows; false is kBaseline's kernel, unchanged.
template <int kRowsPerTile>
void launch_splitkv_mma(const DecodeKernelArgs& args, bool fused_combine, cudaStream_t stream);
// (args.timeline set: the instantiation that records its phases; otherwise the same code.)

// Launcher of the wgmma split-KV kernel (64-row tiles; instantiations/wgmma.cu).
void launch_splitkv_wgmma(const DecodeKernelArgs& args, bool fused_combine, cudaStream_t stream);

// The seesaw body's orders (MlaDecodeSchedule kSeesawPvFirst, kSeesawSFirst, kSeesawPairs;
// splitkv_seesaw.cuh): P·V of the other's page first, S of the own page first, or pages in pairs.
enum class SeesawOrder { kPvFirst, kSFirst, kPairs };

// Launcher of the seesaw split-KV kernel (kFast, 64-row tiles; instantiations/seesaw.cu): the two
// warpgroups alternate S and P·V instead of running the phases in lockstep.
void launch_splitkv_seesaw(const DecodeKernelArgs& args, bool fused_combine, SeesawOrder order,
                           cudaStream_t stream);
// The pairs order's diagnostic instantiation recording args.pair_trace (launched combine).
void launch_splitkv_seesaw_pair_trace(const DecodeKernelArgs& args, cudaStream_t stream);
// The instantiations recording args.timeline: the pairs order, else P·V first (launched combine).
void launch_splitkv_seesaw_timeline(const DecodeKernelArgs& args, SeesawOrder order,
                                    cudaStream_t stream);

}  // namespace mla::kernels::decode
