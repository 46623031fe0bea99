// Dense multi-head attention with log-sum-exp, fp32 in and out, double inside: MLA prefill's
// attention (d_qk 192 = nope 128 + rope 64, d_v 128) over keys and values that the caller has
// up-projected from the latents, per head.
//
// Causal means bottom-right aligned, as the decode op: query i of q_count sees keys
// [0, k_count - q_count + i], which is plain causal when the keys are the queries' own tokens. A
// query that sees no key gets out = 0 and lse = -inf (the merge treats it as empty). The LSE is the
// natural log of Σ exp(scale · q·k), the quantity merge_attention_partial combines.
#pragma once

#include <cstdint>

namespace mla::ref {

struct AttentionArgs {
  int64_t q_count = 0;
  int64_t k_count = 0;
  int64_t heads = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  bool causal = false;
  float softmax_scale = 0.f;
  const float* q = nullptr;  // [q_count, heads, d_qk]
  int64_t q_token_stride = 0, q_head_stride = 0;
  const float* k = nullptr;  // [k_count, heads, d_qk]
  int64_t k_token_stride = 0, k_head_stride = 0;
  const float* v = nullptr;  // [k_count, heads, d_v]
  int64_t v_token_stride = 0, v_head_stride = 0;
  float* out = nullptr;  // [q_count, heads, d_v]
  int64_t out_token_stride = 0, out_head_stride = 0;
  float* lse = nullptr;  // [q_count, heads]: lse[t · lse_token_stride + h]
  int64_t lse_token_stride = 0;
};

void attention(const AttentionArgs& args);

}  // namespace mla::ref
