// Host side of the prefill attention: launch shape, boundary validation, and the launcher.
//
// Validation happens here, once, with messages that name the argument, the expected and the
// actual value. The spans live on the device, so their contents are the caller's promise
// (disjoint q ranges inside num_q_rows, k ranges inside num_k_rows, q_count <= max_span_q_count).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/arg_checks.h"
#include "core/error.h"
#include "mla/kernels/prefill_attention.h"
#include "prefill_attention/config.h"

namespace mla::kernels {
namespace prefill {
void launch_prefill_kernels(const PrefillAttentionParams& params, const PrefillLaunchShape& shape,
                            cudaStream_t stream);
}  // namespace prefill

namespace {

constexpr int kMaxGridYZ = 65535;
constexpr int kLargeTileMinSpanRows = 128;
constexpr int64_t kMaxGridX = 2147483647;

void require(bool ok, const std::string& message) {
  arg_checks::require(ok, "prefill_attention", message);
}

void check_pointer(const void* pointer, const char* name, size_t alignment) {
  arg_checks::check_pointer("prefill_attention", name, pointer, alignment);
}

void check_stride(int64_t stride, const char* name, int64_t minimum) {
  arg_checks::check_stride("prefill_attention", name, stride, minimum);
}

}  // namespace

void PrefillAttentionParams::set_contiguous_strides() {
  q_head_stride = head_dim_qk;
  q_row_stride = int64_t(num_heads) * head_dim_qk;
  k_head_stride = head_dim_qk;
  k_row_stride = int64_t(num_heads) * head_dim_qk;
  v_head_stride = head_dim_v;
  v_row_stride = int64_t(num_heads) * head_dim_v;
  out_head_stride = head_dim_v;
  out_row_stride = int64_t(num_heads) * head_dim_v;
  lse_row_stride = num_heads;
}

PrefillLaunchShape prefill_attention_launch_shape(const PrefillAttentionParams& params) {
  PrefillLaunchShape shape;
  shape.tile_rows = params.tile_rows;
  // Automatic: the 128-row shape (32 rows a warp) once spans are longer than 128 rows. Measured
  // on the H200 (docs/kernels/prefill_attention.md): 5-13% faster from 512-row spans up, even at
  // 256, and slower for spans of <= 64 rows, where half its rows would idle.
  if (shape.tile_rows == 0)
    shape.tile_rows = params.max_span_q_count > kLargeTileMinSpanRows ? prefill::LargeTile::kBlockM
                                                                      : prefill::SmallTile::kBlockM;
  shape.q_tiles = (params.max_span_q_count + shape.tile_rows - 1) / shape.tile_rows;
  shape.spans = params.num_spans;
  shape.heads = params.num_heads;
  shape.fill_blocks = (params.num_q_rows + prefill::kFillRows - 1) / prefill::kFillRows;
  return shape;
}

void check_prefill_attention_args(const PrefillAttentionParams& p) {
  require(p.head_dim_qk == kPrefillHeadDimQK,
          fmt::format("head_dim_qk must be {} (128 nope + 64 rope), got {}", kPrefillHeadDimQK,
                      p.head_dim_qk));
  require(p.head_dim_v == kPrefillHeadDimV,
          fmt::format("head_dim_v must be {}, got {}", kPrefillHeadDimV, p.head_dim_v));
  require(p.num_heads >= 1 && p.num_heads <= kMaxGridYZ,
          fmt::format("num_heads must be in [1, {}], got {}", kMaxGridYZ, p.num_heads));
  require(p.num_q_rows >= 0 && p.num_q_rows <= kMaxGridX,
          fmt::format("num_q_rows must be in [0, {}], got {}", kMaxGridX, p.num_q_rows));
  require(p.num_k_rows >= 0 && p.num_k_rows <= kMaxGridX,
          fmt::format("num_k_rows must be in [0, {}], got {}", kMaxGridX, p.num_k_rows));
  require(std::isfinite(p.softmax_scale) && p.softmax_scale > 0.f,
          fmt::format("softmax_scale must be finite and > 0, got {}", p.softmax_scale));
  require(p.num_spans >= 0 && p.num_spans <= kMaxGridYZ,
          fmt::format("num_spans must be in [0, {}] (the grid's y dimension), got {}", kMaxGridYZ,
                      p.num_spans));
  require(p.max_span_q_count >= 0 && p.max_span_q_count <= p.num_q_rows,
          fmt::format("max_span_q_count must be in [0, num_q_rows = {}], got {}", p.num_q_rows,
                      p.max_span_q_count));
  if (p.num_spans > 0) require(p.spans != nullptr, "spans is null but num_spans > 0");
  require(p.tile_rows == 0 || p.tile_rows == prefill::SmallTile::kBlockM ||
              p.tile_rows == prefill::LargeTile::kBlockM,
          fmt::format("tile_rows must be 0 (automatic), {} or {}, got {}",
                      prefill::SmallTile::kBlockM, prefill::LargeTile::kBlockM, p.tile_rows));
  if (p.num_q_rows == 0) return;

  // Outputs: written for every row, so they must exist and rows/heads must not overlap.
  check_pointer(p.out, "out", 16);
  check_stride(p.out_head_stride, "out_head_stride", p.num_heads > 1 ? kPrefillHeadDimV : 0);
  check_stride(p.out_row_stride, "out_row_stride",
               int64_t(p.num_heads - 1) * p.out_head_stride + kPrefillHeadDimV);
  check_pointer(p.lse, "lse", 4);
  require(p.lse_row_stride >= p.num_heads,
          fmt::format("lse_row_stride must be >= num_heads = {}, got {}", p.num_heads,
                      p.lse_row_stride));
  if (p.num_spans == 0 || p.max_span_q_count == 0) return;

  // Inputs: views are allowed (a head stride of 0 shares one row among the heads).
  check_pointer(p.q, "q", 16);
  check_stride(p.q_head_stride, "q_head_stride", 0);
  check_stride(p.q_row_stride, "q_row_stride", 0);
  if (p.num_k_rows == 0) return;
  check_pointer(p.k, "k", 16);
  check_stride(p.k_head_stride, "k_head_stride", 0);
  check_stride(p.k_row_stride, "k_row_stride", 0);
  check_pointer(p.v, "v", 16);
  check_stride(p.v_head_stride, "v_head_stride", 0);
  check_stride(p.v_row_stride, "v_row_stride", 0);
}

void launch_prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream) {
  check_prefill_attention_args(params);
  if (params.num_q_rows == 0) return;
  prefill::launch_prefill_kernels(params, prefill_attention_launch_shape(params), stream);
}

}  // namespace mla::kernels
