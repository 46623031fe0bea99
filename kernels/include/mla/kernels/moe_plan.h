// The MoE experts op's planning arithmetic: row tiles and the workspace layout (pure, no CUDA).
//
// The (token, k) pairs are sorted by expert on the device; expert e owns sorted rows
// [offsets[e], offsets[e] + counts[e]). Its rows are cut into tiles of kMoeRowsPerTile, and the
// expert GEMMs launch one CTA column per *possible* tile: at most ceil(pairs / kMoeRowsPerTile) +
// min(num_experts, pairs), because every non-empty expert adds at most one partial tile. The
// grid is therefore a function of the shape alone (CUDA-graph capturable); the tile table written
// on the device says which tiles are real, and the CTAs of the others exit at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mla/kernels/host_device.h"

namespace mla::kernels {

inline constexpr int kMoeRowsPerTile = 32;  // rows (sorted pairs) per expert-GEMM tile
inline constexpr int kMoeMaxExperts = 512;  // the plan kernel keeps one counter per expert
inline constexpr int kMoeMaxTopK = 32;      // the router keeps one chosen expert per lane
inline constexpr size_t kMoeWorkspaceAlignment = 256;

// The most row tiles `pairs` sorted rows over `num_experts` experts can need.
MLA_HOST_DEVICE int64_t moe_max_row_tiles(int64_t pairs, int num_experts) {
  const int64_t experts = pairs < num_experts ? pairs : num_experts;
  return (pairs + kMoeRowsPerTile - 1) / kMoeRowsPerTile + experts;
}

// Where each piece lives in the caller's workspace (offsets in bytes, each 256-byte aligned).
struct MoeWorkspaceLayout {
  int64_t pairs = 0;           // tokens · top_k
  int64_t max_row_tiles = 0;   // moe_max_row_tiles(pairs, num_experts)
  size_t counts_offset = 0;    // int32[num_experts]: sorted rows per expert
  size_t offsets_offset = 0;   // int32[num_experts + 1]: exclusive scan of counts
  size_t order_offset = 0;     // int32[pairs]: sorted row → pair index t · top_k + k
  size_t position_offset = 0;  // int32[pairs]: pair index → sorted row, -1 for a dropped pair
  size_t tiles_offset = 0;     // int32[max_row_tiles, 2]: (expert, first row in expert); -1 unused
  size_t activation_offset = 0;  // bf16[pairs, intermediate]: silu(gate x) · up x per sorted row
  size_t expert_out_offset = 0;  // fp32[pairs, hidden]: down_e(activation) per sorted row
  size_t total_bytes = 0;
};

inline size_t moe_align_up(size_t value) {
  return (value + kMoeWorkspaceAlignment - 1) / kMoeWorkspaceAlignment * kMoeWorkspaceAlignment;
}

inline MoeWorkspaceLayout moe_workspace_layout(int64_t tokens, int64_t hidden, int64_t intermediate,
                                               int num_experts, int top_k) {
  MoeWorkspaceLayout layout;
  layout.pairs = tokens * top_k;
  layout.max_row_tiles = moe_max_row_tiles(layout.pairs, num_experts);
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    const size_t offset = at;
    at = moe_align_up(at + bytes);
    return offset;
  };
  const size_t pairs = static_cast<size_t>(layout.pairs);
  layout.counts_offset = take(sizeof(int32_t) * num_experts);
  layout.offsets_offset = take(sizeof(int32_t) * (num_experts + 1));
  layout.order_offset = take(sizeof(int32_t) * pairs);
  layout.position_offset = take(sizeof(int32_t) * pairs);
  layout.tiles_offset = take(sizeof(int32_t) * 2 * static_cast<size_t>(layout.max_row_tiles));
  layout.activation_offset = take(2 * pairs * static_cast<size_t>(intermediate));
  layout.expert_out_offset = take(sizeof(float) * pairs * static_cast<size_t>(hidden));
  layout.total_bytes = at;
  return layout;
}

}  // namespace mla::kernels
