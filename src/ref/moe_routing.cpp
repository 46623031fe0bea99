// The DeepSeek MoE router; see moe_routing.h.
#include "ref/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace mla::ref {
namespace {

// Indices of the `count` largest values, best first, lower index first among equals.
std::vector<int> top_indices(const std::vector<float>& values, int count) {
  std::vector<int> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return values[a] > values[b]; });
  order.resize(count);
  return order;
}

// What the choice rests on for one token: the scores (which weigh), the choice values (scores
// plus the correction bias for noaux_tc; -inf outside the kept groups) and the group scores.
struct RouterChoice {
  std::vector<float> scores;
  std::vector<float> choice;
  std::vector<float> group_scores;  // empty for greedy
};

RouterChoice router_choice(const float* logits, const float* bias, const MoeRoutingParams& params) {
  const int num_experts = params.num_experts;
  MLA_CHECK(params.top_k >= 1 && params.top_k <= num_experts);
  RouterChoice r;
  std::vector<float>& scores = r.scores;
  scores.resize(num_experts);
  if (params.scoring == MoeScoring::kSoftmax) {
    const float max_logit = *std::max_element(logits, logits + num_experts);
    double total = 0.0;
    for (int e = 0; e < num_experts; ++e) total += std::exp(double(logits[e]) - max_logit);
    for (int e = 0; e < num_experts; ++e)
      scores[e] = static_cast<float>(std::exp(double(logits[e]) - max_logit) / total);
  } else {
    for (int e = 0; e < num_experts; ++e)
      scores[e] = static_cast<float>(1.0 / (1.0 + std::exp(-double(logits[e]))));
  }
  std::vector<float>& choice = r.choice;
  choice = scores;
  if (params.method == MoeTopk::kNoauxTc && bias != nullptr)
    for (int e = 0; e < num_experts; ++e) choice[e] += bias[e];

  if (params.method != MoeTopk::kGreedy) {
    MLA_CHECK(params.n_group >= 1 && num_experts % params.n_group == 0);
    const int group_size = num_experts / params.n_group;
    r.group_scores.resize(params.n_group);
    for (int g = 0; g < params.n_group; ++g) {
      std::vector<float> members(choice.begin() + g * group_size,
                                 choice.begin() + (g + 1) * group_size);
      std::sort(members.begin(), members.end(), std::greater<float>());
      r.group_scores[g] = params.method == MoeTopk::kNoauxTc ? members[0] + members[1] : members[0];
    }
    std::vector<bool> kept(params.n_group, false);
    for (int g : top_indices(r.group_scores, params.topk_group)) kept[g] = true;
    for (int e = 0; e < num_experts; ++e)
      if (!kept[e / group_size]) choice[e] = -std::numeric_limits<float>::infinity();
  }
  return r;
}

// values sorted best first: values[count - 1] - values[count], or +inf when nothing competes.
float gap_after(std::vector<float> values, int count) {
  std::sort(values.begin(), values.end(), std::greater<float>());
  if (count >= static_cast<int>(values.size()) || !std::isfinite(values[count]))
    return std::numeric_limits<float>::infinity();
  return values[count - 1] - values[count];
}

}  // namespace

float routing_margin(const float* logits, const float* bias, const MoeRoutingParams& params) {
  const RouterChoice r = router_choice(logits, bias, params);
  float margin = gap_after(r.choice, params.top_k);
  if (!r.group_scores.empty())
    margin = std::min(margin, gap_after(r.group_scores, params.topk_group));
  return margin;
}

void route_experts(const float* logits, const float* bias, const MoeRoutingParams& params,
                   int32_t* expert_ids, float* weights) {
  const RouterChoice r = router_choice(logits, bias, params);
  const std::vector<float>& scores = r.scores;
  const std::vector<float>& choice = r.choice;
  const std::vector<int> chosen = top_indices(choice, params.top_k);
  double total = 0.0;
  for (int i = 0; i < params.top_k; ++i) {
    expert_ids[i] = chosen[i];
    weights[i] = scores[chosen[i]];
    total += weights[i];
  }
  const bool normalized = params.normalize && params.top_k > 1;
  if (normalized)
    for (int i = 0; i < params.top_k; ++i)
      weights[i] = static_cast<float>(weights[i] / (total + 1e-20));
  if (!normalized || params.scale_when_normalized)
    for (int i = 0; i < params.top_k; ++i) weights[i] *= params.routed_scaling_factor;
  MLA_CHECK_GE(params.appended_experts, 0);
  for (int j = 0; j < params.appended_experts; ++j) {
    expert_ids[params.top_k + j] = params.num_experts + j;
    weights[params.top_k + j] = 1.0f;
  }
}

}  // namespace mla::ref
