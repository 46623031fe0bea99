// The routed-experts block of a DeepSeek MoE layer on the GPU: the router, then the experts.
//
//   launch_moe_route:   router logits → top_k (expert id, weight) per token, exactly as
//                       ref::route_experts (src/ref/moe_routing.h): softmax or sigmoid scores;
//                       greedy, group_limited_greedy or noaux_tc choice; the correction bias only
//                       picks experts, never weighs them; ties go to the lower expert id.
//   launch_moe_experts: out[t] (+)= Σ_k w[t,k] · down_e(silu(gate_e x[t]) · up_e x[t]), e =
//   id[t,k]. The shared experts can ride along as extra experts (ids num_experts.., appended by
//   the router with weight 1): their rows are summed with the routed ones in fp32.
//
// launch_moe_experts runs, all on the device and all capturable in a CUDA graph (no host sync,
// grids fixed by the shape): a plan kernel (count pairs per expert, exclusive scan, stable scatter
// of the (token, k) pairs into expert-sorted order, the row-tile table); a grouped gate/up GEMM
// that gathers x rows by token and writes silu(gate) · up in bf16; a grouped down GEMM writing fp32
// rows; and the weighted un-permute, which sums each token's top_k rows in fixed k order
// (deterministic, batch-invariant, no atomics). An expert's weights are streamed once per 32-row
// tile of its rows, and not at all when no token picked it. Ids outside [0, num_experts) contribute
// nothing (as in the CPU backend). The subtle part: the activation is rounded to bf16 between the
// two GEMMs, as a bf16 model does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtypes.h"
#include "mla/kernels/moe_plan.h"
#include "mla/kernels/scalar_type.h"

namespace mla::kernels {

// Mirrors ref::MoeRoutingParams (the kernels tier does not depend on src/ref).
enum class MoeScoring { kSoftmax, kSigmoid };                   // scoring_func
enum class MoeTopk { kGreedy, kGroupLimitedGreedy, kNoauxTc };  // topk_method

struct MoeRouteParams {
  int num_experts = 0;  // n_routed_experts, 1..512
  int top_k = 0;        // num_experts_per_tok, 1..min(32, num_experts)
  int n_group = 1;      // n_group (group methods: divides num_experts)
  int topk_group = 1;   // topk_group, 1..n_group
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopk method = MoeTopk::kGreedy;
  bool normalize = false;              // norm_topk_prob
  float routed_scaling_factor = 1.0f;  // routed_scaling_factor
  bool scale_when_normalized = true;   // V3: true; V2's reference: false
  // Always-on pairs after the top_k routed ones (the shared experts folded into
  // launch_moe_experts): ids num_experts + j, weight exactly 1 (not renormalised, not scaled);
  // 0..32 − top_k.
  int appended_experts = 0;
};

// router_logits [tokens, num_experts] fp32 (row stride logits_row_stride elements), bias
// [num_experts] fp32 or null (read only by noaux_tc) → expert_ids [tokens, pairs] int32 (the
// routed ones best first, then the appended ones), expert_weights [tokens, pairs] fp32, pairs =
// top_k + appended_experts. One warp per token.
void check_moe_route_args(const float* router_logits, int64_t logits_row_stride, int64_t tokens,
                          const MoeRouteParams& params, const int32_t* expert_ids,
                          const float* expert_weights);
void launch_moe_route(const float* router_logits, int64_t logits_row_stride, const float* bias,
                      int64_t tokens, const MoeRouteParams& params, int32_t* expert_ids,
                      float* expert_weights, cudaStream_t stream);

struct MoeExpertsParams {
  int64_t tokens = 0;
  int64_t hidden = 0;        // hidden_size; multiple of 8
  int64_t intermediate = 0;  // moe_intermediate_size; multiple of 8
  int num_experts = 0;       // 1..512
  int top_k = 0;             // 1..32
  const bf16* x = nullptr;   // [tokens, hidden] bf16, row stride x_row_stride (multiple of 8)
  int64_t x_row_stride = 0;
  const int32_t* expert_ids = nullptr;     // [tokens, top_k] int32, contiguous
  const float* expert_weights = nullptr;   // [tokens, top_k] fp32, contiguous
  const bf16* const* gate_proj = nullptr;  // [num_experts] device array of device pointers, each
                                           // [intermediate, hidden] bf16 row-major, 16-byte aligned
  const bf16* const* up_proj = nullptr;    // same as gate_proj
  const bf16* const* down_proj = nullptr;  // [num_experts] pointers to [hidden, intermediate] bf16
  void* out = nullptr;                     // [tokens, hidden] out_type, row stride out_row_stride
  ScalarType out_type = ScalarType::kBF16;
  int64_t out_row_stride = 0;
  bool accumulate =
      false;  // out += result (onto the shared experts' output) instead of out = result
  void* workspace = nullptr;  // moe_experts_workspace_size(>= tokens, ...) bytes, 256-byte aligned
  size_t workspace_bytes = 0;
};

// Workspace for up to max_tokens tokens (the plan, the bf16 activation and the fp32 expert rows:
// about max_tokens · top_k · (2 · intermediate + 4 · hidden) bytes).
size_t moe_experts_workspace_size(int64_t max_tokens, int64_t hidden, int64_t intermediate,
                                  int num_experts, int top_k);

// Boundary validation; throws mla::Error naming the argument, the expected and the actual value.
void check_moe_experts_args(const MoeExpertsParams& params);

// Validate, then launch the four kernels on `stream`. Asynchronous; no allocation; capturable.
// The plan stays in the workspace afterwards (moe_workspace_layout() says where; tests read it).
void launch_moe_experts(const MoeExpertsParams& params, cudaStream_t stream);

}  // namespace mla::kernels
