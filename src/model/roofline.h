// The bytes a decode step must move (what `mla bench step` and `mla bench throughput` divide by
// the measured copy bandwidth to get the step's roofline time): the weights the step touches plus
// the latent cache it reads. Pure arithmetic on the config; bf16 weights and cache.
//
// The subtle thing is the routed experts: a step touches only the experts its tokens pick. With
// `batch` tokens each picking top_k distinct experts of E (taken as uniform), the expected number
// of distinct experts is E · (1 − (1 − top_k / E)^batch); at batch 128 on V2-Lite that is all 64.
// The embedding table is read a row per token (unless lm_head shares it, then it is read whole).
#pragma once

#include <cstdint>

#include "weights/model_config.h"

namespace mla::model {

// Bytes of the model's weights (bf16, as the CUDA backend holds them; the fp32 correction bias is
// counted at 4 bytes), split the way a decode step touches them.
struct ModelWeightBytes {
  double dense = 0;       // every weight but the routed experts and the embedding table
  double embedding = 0;   // model.embed_tokens.weight (0 when lm_head is tied to it: in `dense`)
  double one_expert = 0;  // one routed expert's gate, up and down projections
  int num_moe_layers = 0;
  int num_experts = 0;  // routed experts per MoE layer
  double total() const { return dense + embedding + one_expert * num_experts * num_moe_layers; }
};
ModelWeightBytes model_weight_bytes(const weights::ModelConfig& config);

// E · (1 − (1 − top_k / E)^draws): distinct experts hit by `draws` tokens of top_k picks each.
double expected_distinct_experts(int num_experts, int top_k, int draws);

struct DecodeStepBytes {
  double weights = 0;            // dense + embedding rows + experts hit, all MoE layers
  double kv = 0;                 // latent cache read: context_tokens · latent_dim · 2 · layers
  double experts_per_layer = 0;  // expected distinct routed experts per MoE layer
  double total() const { return weights + kv; }
};
// `context_tokens`: the keys every decode row reads, summed over the batch (each row's cached
// tokens plus itself).
DecodeStepBytes decode_step_bytes(const weights::ModelConfig& config, int batch,
                                  int64_t context_tokens);

}  // namespace mla::model
