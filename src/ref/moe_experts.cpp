// The routed experts on the CPU and the permutation plan; see moe_experts.h.
#include "ref/moe_experts.h"

#include <cmath>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"

namespace mla::ref {

void moe_experts(const MoeExpertsArgs& args) {
  MLA_CHECK(args.tokens >= 0 && args.hidden >= 1 && args.intermediate >= 1);
  MLA_CHECK(args.num_experts >= 1 && args.top_k >= 1);
  const int64_t hidden = args.hidden, width = args.intermediate;
#pragma omp parallel for schedule(dynamic, \
                                  1) if (args.tokens * args.top_k * hidden * width > (1 << 22))
  for (int64_t t = 0; t < args.tokens; ++t) {
    const float* x = args.x + t * args.x_row_stride;
    std::vector<double> result(hidden, 0.0);
    std::vector<double> activation(width);
    for (int k = 0; k < args.top_k; ++k) {
      const int32_t e = args.expert_ids[t * args.top_k + k];
      if (e < 0 || e >= args.num_experts) continue;
      const float* gate = args.gate_proj[e];
      const float* up = args.up_proj[e];
      const float* down = args.down_proj[e];
      for (int64_t j = 0; j < width; ++j) {
        double g = 0.0, u = 0.0;
        for (int64_t i = 0; i < hidden; ++i) {
          g += double(x[i]) * gate[j * hidden + i];
          u += double(x[i]) * up[j * hidden + i];
        }
        double a = g / (1.0 + std::exp(-g)) * u;
        if (args.round_activation_to_bf16) a = round_to_bf16(static_cast<float>(a));
        activation[j] = a;
      }
      const double weight = args.expert_weights[t * args.top_k + k];
      for (int64_t i = 0; i < hidden; ++i) {
        double y = 0.0;
        for (int64_t j = 0; j < width; ++j) y += activation[j] * down[i * width + j];
        result[i] += weight * y;
      }
    }
    float* out = args.out + t * args.out_row_stride;
    for (int64_t i = 0; i < hidden; ++i)
      out[i] = static_cast<float>(args.accumulate ? double(out[i]) + result[i] : result[i]);
  }
}

MoePermutation moe_permutation(const int32_t* expert_ids, int64_t tokens, int top_k,
                               int num_experts) {
  MLA_CHECK(tokens >= 0 && top_k >= 1 && num_experts >= 1);
  const int64_t pairs = tokens * top_k;
  MoePermutation plan;
  plan.counts.assign(num_experts, 0);
  for (int64_t i = 0; i < pairs; ++i)
    if (expert_ids[i] >= 0 && expert_ids[i] < num_experts) ++plan.counts[expert_ids[i]];
  plan.offsets.assign(num_experts + 1, 0);
  for (int e = 0; e < num_experts; ++e) plan.offsets[e + 1] = plan.offsets[e] + plan.counts[e];
  plan.order.assign(plan.offsets[num_experts], -1);
  plan.position.assign(pairs, -1);
  std::vector<int32_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = expert_ids[i];
    if (e < 0 || e >= num_experts) continue;
    plan.position[i] = next[e];
    plan.order[next[e]++] = static_cast<int32_t>(i);
  }
  return plan;
}

}  // namespace mla::ref
