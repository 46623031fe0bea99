// DeepSeek's MoE router for one token: scores, expert choice per topk_method, routing weights.
//
//   scores = softmax(logits) or sigmoid(logits)                      (scoring_func)
//   choice = scores + e_score_correction_bias (noaux_tc), else scores
//   greedy:               the top_k experts by choice
//   group_limited_greedy: groups ranked by their best expert; experts of the best topk_group
//                         groups compete, the rest are out
//   noaux_tc:             groups ranked by the sum of their best two experts (bias included)
//   weight = scores[expert] (never the bias); renormalised to sum 1 when norm_topk_prob and
//   top_k > 1; then × routed_scaling_factor. DeepSeek-V2's reference scales only when it does not
//   renormalise (scale_when_normalized = false); V3's always scales.
//   appended_experts (the shared experts folded into the routed experts' GEMM): that many pairs
//   follow the top_k routed ones, ids num_experts, num_experts + 1, .., weight exactly 1 (not
//   renormalised, not scaled); the routed pairs are the same as without them.
// The subtle part: the bias only picks experts, it never weighs them. Ties go to the lower expert.
#pragma once

#include <cstdint>

namespace mla::ref {

enum class MoeScoring { kSoftmax, kSigmoid };
enum class MoeTopk { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct MoeRoutingParams {
  int num_experts = 0;  // n_routed_experts
  int top_k = 0;        // num_experts_per_tok
  int n_group = 1;      // n_group
  int topk_group = 1;   // topk_group
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopk method = MoeTopk::kGreedy;
  bool normalize = false;              // norm_topk_prob
  float routed_scaling_factor = 1.0f;  // routed_scaling_factor
  bool scale_when_normalized = true;   // V3: true; V2: false
  int appended_experts = 0;            // always-on pairs after the top_k routed ones (see above)
};

// logits [num_experts] (fp32 router output); bias [num_experts] or nullptr; writes top_k expert
// ids (best first) and their weights, then the appended_experts always-on pairs: top_k +
// appended_experts entries in all.
void route_experts(const float* logits, const float* bias, const MoeRoutingParams& params,
                   int32_t* expert_ids, float* weights);

// How firmly the choice is made: the smallest gap, in choice units (scores, plus the bias for
// noaux_tc), at a boundary that decides which experts are chosen: the top_k-th chosen expert
// against the best one left out (within the kept groups), and the topk_group-th kept group against
// the best group left out. +inf when nothing competes. A change of the choice values smaller than
// margin / 4 (group scores of noaux_tc add two of them) cannot change which experts are chosen:
// where the margin is below a backend's rounding, a bf16 backend may choose differently.
float routing_margin(const float* logits, const float* bias, const MoeRoutingParams& params);

}  // namespace mla::ref
