// MLA prefill attention on the materialised ("MHA") path: the host API (plain C++).
//
// Per span, queries [q_begin, q_begin + q_count) attend to keys [k_begin, k_begin + k_count) of
// their own head with d_qk = 192 (128 nope + 64 rope) and d_v = 128, bf16 in and out, fp32 LSE
// (natural log of Σ exp(scale · q·k)). Causal is bottom-right aligned: query i of a span sees keys
// [0, k_count - q_count + i], as ref::attention. The subtle part: a row that sees no key (k_count
// 0, or causal top rows when k_count < q_count) and every row no span covers get out = 0 and
// lse = -inf; keys and values outside a span's range are never read, so NaN there cannot leak.
//
// Two kernels on `stream`: one zero-fills the rows no span covers, one runs the spans
// (FlashAttention-2 style: mma.sync m16n8k16, ldmatrix, cp.async double buffering). No
// workspace, no host synchronisation: CUDA-graph capturable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtypes.h"

namespace mla::kernels {

constexpr int kPrefillHeadDimQK = 192;
constexpr int kPrefillHeadDimV = 128;

// One span as the device reads it (model::AttentionSpan with the flag as int32).
struct AttentionSpanDevice {
  int32_t q_begin = 0;
  int32_t q_count = 0;
  int32_t k_begin = 0;
  int32_t k_count = 0;
  int32_t causal = 0;  // 0 or 1
};

struct PrefillAttentionParams {
  int64_t num_q_rows = 0;  // rows of q/out/lse (all of them; rows outside every span: 0 / -inf)
  int64_t num_k_rows = 0;  // rows of k/v
  int num_heads = 0;
  int head_dim_qk = kPrefillHeadDimQK;  // stated by the caller and validated
  int head_dim_v = kPrefillHeadDimV;
  float softmax_scale = 0.f;  // qk_head_dim^-0.5 · mscale² for DeepSeek

  // Strides in elements; innermost dimension contiguous; every row and head start 16-byte aligned
  // (strides multiples of 8 elements, pointers 16-byte aligned).
  const bf16* q = nullptr;  // [num_q_rows, heads, 192] bf16
  int64_t q_row_stride = 0, q_head_stride = 0;
  const bf16* k = nullptr;  // [num_k_rows, heads, 192] bf16
  int64_t k_row_stride = 0, k_head_stride = 0;
  const bf16* v = nullptr;  // [num_k_rows, heads, 128] bf16 (often a view inside kv [.., 256])
  int64_t v_row_stride = 0, v_head_stride = 0;
  bf16* out = nullptr;  // [num_q_rows, heads, 128] bf16
  int64_t out_row_stride = 0, out_head_stride = 0;
  float* lse = nullptr;  // [num_q_rows, heads] fp32: lse[row · lse_row_stride + head]
  int64_t lse_row_stride = 0;

  const AttentionSpanDevice* spans = nullptr;  // [num_spans] device; q ranges disjoint, in range
  int num_spans = 0;
  int max_span_q_count = 0;  // host-known max q_count over the spans (sizes the grid)
  int tile_rows = 0;         // query rows per CTA: 64 or 128; 0 = by max_span_q_count

  // Fills every stride for contiguous q/k [rows, heads, 192], v [rows, heads, 128],
  // out [rows, heads, 128], lse [rows, heads].
  void set_contiguous_strides();
};

// The grid of the span kernel: x = q tiles of max_span_q_count, y = spans, z = heads.
struct PrefillLaunchShape {
  int tile_rows = 0;  // query rows per CTA (64 or 128)
  int q_tiles = 0;
  int spans = 0;
  int heads = 0;
  int64_t fill_blocks = 0;  // blocks of the uncovered-row fill kernel
};
PrefillLaunchShape prefill_attention_launch_shape(const PrefillAttentionParams& params);

// Boundary validation; throws mla::Error naming the argument, the expected and the actual value.
// The span contents live on the device and are not checked here (the caller built them).
void check_prefill_attention_args(const PrefillAttentionParams& params);

// Validate, then launch. Asynchronous on `stream`; no allocation; CUDA-graph capturable.
void launch_prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace mla::kernels
