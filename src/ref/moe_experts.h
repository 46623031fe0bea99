// The routed experts of a DeepSeek MoE layer on the CPU, and the permutation plan the GPU uses.
//
//   moe_experts:     out[t] (+)= Σ_k w[t,k] · down_e(silu(gate_e x[t]) · up_e x[t]), e = ids[t,k],
//                    the CpuBackend's semantics (ids outside [0, num_experts) contribute nothing),
//                    in double with plain loops, summed over k in order 0..top_k-1.
//   moe_permutation: the (token, k) pairs sorted by expert, stably (by pair index t · top_k + k
//                    within an expert): what the GPU plan kernel must produce bit for bit.
// The subtle part: a bf16 model stores the activation silu(gate)·up in bf16 before down_proj;
// round_activation_to_bf16 models that rounding so a GPU comparison can be tight.
#pragma once

#include <cstdint>
#include <vector>

namespace mla::ref {

struct MoeExpertsArgs {
  int64_t tokens = 0, hidden = 0, intermediate = 0;
  int num_experts = 0, top_k = 0;
  const float* x = nullptr;  // [tokens, hidden], row stride x_row_stride
  int64_t x_row_stride = 0;
  const int32_t* expert_ids = nullptr;      // [tokens, top_k]
  const float* expert_weights = nullptr;    // [tokens, top_k]
  const float* const* gate_proj = nullptr;  // [num_experts] pointers to [intermediate, hidden]
  const float* const* up_proj = nullptr;    // [num_experts] pointers to [intermediate, hidden]
  const float* const* down_proj = nullptr;  // [num_experts] pointers to [hidden, intermediate]
  float* out = nullptr;                     // [tokens, hidden], row stride out_row_stride
  int64_t out_row_stride = 0;
  bool accumulate = false;  // out = out + result instead of out = result
  bool round_activation_to_bf16 = false;
};
void moe_experts(const MoeExpertsArgs& args);

struct MoePermutation {
  std::vector<int32_t> counts;    // [num_experts]: pairs routed to each expert
  std::vector<int32_t> offsets;   // [num_experts + 1]: exclusive scan of counts
  std::vector<int32_t> order;     // [offsets[num_experts]]: sorted row → pair index
  std::vector<int32_t> position;  // [tokens · top_k]: pair index → sorted row, -1 if dropped
};
MoePermutation moe_permutation(const int32_t* expert_ids, int64_t tokens, int top_k,
                               int num_experts);

}  // namespace mla::ref
