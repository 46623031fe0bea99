// model_weight_bytes(), expected_distinct_experts(), decode_step_bytes(); see roofline.h.
#include "model/roofline.h"

#include <cmath>

#include "core/error.h"

namespace mla::model {

ModelWeightBytes model_weight_bytes(const weights::ModelConfig& c) {
  constexpr double kBf16 = 2.0;
  const double hidden = c.hidden_size;
  const double heads = c.num_attention_heads;
  const double table = double(c.vocab_size) * hidden;
  ModelWeightBytes bytes;
  // embed_tokens, final norm, lm_head (the embedding table itself when tied).
  bytes.embedding = c.tie_word_embeddings ? 0.0 : table * kBf16;
  double dense = table + hidden;  // in bf16 parameters
  double dense_f32 = 0;           // fp32 parameters
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    double params = 2 * hidden;  // input_layernorm, post_attention_layernorm
    if (c.q_lora_rank > 0)
      params += c.q_lora_rank * hidden + c.q_lora_rank + heads * c.qk_head_dim() * c.q_lora_rank;
    else
      params += heads * c.qk_head_dim() * hidden;
    params += double(c.latent_dim()) * hidden + c.kv_lora_rank;  // kv_a_proj_with_mqa, its norm
    params += heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;  // kv_b_proj
    params += hidden * heads * c.v_head_dim;                                 // o_proj
    if (c.is_moe_layer(layer)) {
      ++bytes.num_moe_layers;
      params += double(c.n_routed_experts) * hidden;  // router
      // The shared experts, read by every step (also when folded into the routed experts' op:
      // the same bytes, as n_shared_experts extra experts every token picks).
      params += 3.0 * c.moe_intermediate_size * c.n_shared_experts * hidden;
      if (c.topk_method == weights::TopkMethod::kNoauxTc)
        dense_f32 += c.n_routed_experts;  // e_score_correction_bias stays fp32
    } else {
      params += 3.0 * c.intermediate_size * hidden;
    }
    dense += params;
  }
  bytes.dense = dense * kBf16 + dense_f32 * 4.0;
  bytes.num_experts = c.n_routed_experts;
  bytes.one_expert = 3.0 * c.moe_intermediate_size * hidden * kBf16;
  return bytes;
}

double expected_distinct_experts(int num_experts, int top_k, int draws) {
  if (num_experts <= 0 || top_k <= 0 || draws <= 0) return 0.0;
  MLA_CHECK_LE(top_k, num_experts);
  const double miss = 1.0 - double(top_k) / num_experts;  // one token leaves a given expert out
  return num_experts * (1.0 - std::pow(miss, draws));
}

DecodeStepBytes decode_step_bytes(const weights::ModelConfig& c, int batch,
                                  int64_t context_tokens) {
  const ModelWeightBytes weights = model_weight_bytes(c);
  DecodeStepBytes bytes;
  bytes.experts_per_layer =
      expected_distinct_experts(c.n_routed_experts, c.num_experts_per_tok, batch);
  const double embedding_rows = weights.embedding > 0 ? double(batch) * c.hidden_size * 2.0 : 0.0;
  bytes.weights = weights.dense + embedding_rows +
                  weights.one_expert * bytes.experts_per_layer * weights.num_moe_layers;
  bytes.kv = double(context_tokens) * c.latent_dim() * 2.0 * c.num_hidden_layers;
  return bytes;
}

}  // namespace mla::model
