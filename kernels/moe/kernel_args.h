// The MoE kernels' arguments (what the host side computes from the public params) and the
// internal launchers that moe_api.cpp calls after validation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtypes.h"
#include "mla/kernels/moe.h"

namespace mla::kernels::moe {

struct RouteArgs {
  const float* logits = nullptr;  // [tokens, num_experts] fp32, row stride logits_row_stride
  int64_t logits_row_stride = 0;
  const float* bias = nullptr;  // [num_experts] fp32 or null
  int64_t tokens = 0;
  MoeRouteParams params;
  int32_t* expert_ids = nullptr;    // [tokens, top_k + appended_experts] int32
  float* expert_weights = nullptr;  // [tokens, top_k + appended_experts] fp32
};

struct PlanArgs {
  const int32_t* expert_ids = nullptr;  // [pairs] int32
  int64_t pairs = 0;
  int num_experts = 0;
  int64_t max_row_tiles = 0;
  int32_t* counts = nullptr;    // [num_experts]
  int32_t* offsets = nullptr;   // [num_experts + 1]
  int32_t* order = nullptr;     // [pairs]
  int32_t* position = nullptr;  // [pairs]
  int32_t* tiles = nullptr;     // [max_row_tiles, 2]
};

// C[row] = A[row] · Bᵀ for the sorted rows of each expert (see config.h).
struct GemmArgs {
  int64_t n = 0;  // output columns: intermediate (gate/up) or hidden (down)
  int64_t k = 0;  // reduction: hidden (gate/up) or intermediate (down)
  int top_k = 0;
  const bf16* a = nullptr;          // gate/up: x [tokens, hidden] (rows gathered by token); down:
  int64_t a_row_stride = 0;         //   activation [pairs, intermediate] (sorted rows)
  const bf16* const* b0 = nullptr;  // [num_experts] → gate_proj (gate/up) or down_proj (down)
  const bf16* const* b1 = nullptr;  // [num_experts] → up_proj (gate/up); unused by down
  void* c = nullptr;  // gate/up: activation bf16 [pairs, n]; down: expert rows fp32 [pairs, n]
  const int32_t* counts = nullptr;   // [num_experts]
  const int32_t* offsets = nullptr;  // [num_experts + 1]
  const int32_t* order = nullptr;    // [pairs]
  const int32_t* tiles = nullptr;    // [max_row_tiles, 2]
  int64_t max_row_tiles = 0;
};

struct UnpermuteArgs {
  int64_t tokens = 0, hidden = 0;
  int top_k = 0;
  const float* expert_out = nullptr;      // [pairs, hidden] fp32
  const int32_t* position = nullptr;      // [tokens · top_k]
  const float* expert_weights = nullptr;  // [tokens, top_k]
  void* out = nullptr;                    // [tokens, hidden] out_type
  ScalarType out_type = ScalarType::kBF16;
  int64_t out_row_stride = 0;
  bool accumulate = false;
};

void launch_route_kernel(const RouteArgs& args, cudaStream_t stream);
void launch_plan_kernel(const PlanArgs& args, cudaStream_t stream);
void launch_gate_up_kernel(const GemmArgs& args, cudaStream_t stream);
void launch_down_kernel(const GemmArgs& args, cudaStream_t stream);
void launch_unpermute_kernel(const UnpermuteArgs& args, cudaStream_t stream);

}  // namespace mla::kernels::moe
