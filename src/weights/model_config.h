// config.json → ModelConfig for DeepseekV2ForCausalLM and DeepseekV3ForCausalLM.
//
// Field names are the config.json keys. Absent keys take the defaults of the architecture's own
// reference code (DeepSeek's modeling_deepseek.py): V2 routes softmax/greedy and multiplies by
// routed_scaling_factor only when it does not renormalise; V3 routes sigmoid/noaux_tc,
// renormalises, then scales. YaRN parameters come from `rope_scaling` (released checkpoints) or
// `rope_parameters` (newer transformers, which may also hold rope_theta).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace mla::weights {

enum class Architecture { kDeepseekV2, kDeepseekV3 };
enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };
enum class ScoringFunc { kSoftmax, kSigmoid };

const char* to_string(Architecture value);
const char* to_string(TopkMethod value);
const char* to_string(ScoringFunc value);

struct RopeScaling {
  bool yarn = false;                         // rope_scaling.type / rope_type == "yarn"
  double factor = 1.0;                       // factor
  int original_max_position_embeddings = 0;  // original_max_position_embeddings
  double beta_fast = 32.0;                   // beta_fast
  double beta_slow = 1.0;                    // beta_slow
  double mscale = 1.0;                       // mscale
  double mscale_all_dim = 0.0;               // mscale_all_dim
  double attention_factor = 0.0;             // attention_factor (0: derived from the mscales)
};

struct ModelConfig {
  Architecture architecture = Architecture::kDeepseekV2;  // architectures[0]
  int vocab_size = 0;                                     // vocab_size
  int hidden_size = 0;                                    // hidden_size
  int intermediate_size = 0;                              // intermediate_size (dense layers)
  int num_hidden_layers = 0;                              // num_hidden_layers
  int num_attention_heads = 0;                            // num_attention_heads
  double rms_norm_eps = 1e-6;                             // rms_norm_eps
  bool tie_word_embeddings = false;                       // tie_word_embeddings
  int max_position_embeddings = 0;                        // max_position_embeddings
  int bos_token_id = -1;                                  // bos_token_id
  std::vector<int> eos_token_ids;                         // eos_token_id (int or list)

  // MLA.
  int q_lora_rank = 0;        // q_lora_rank (null → 0: q_proj instead of q_a/q_b)
  int kv_lora_rank = 0;       // kv_lora_rank
  int qk_nope_head_dim = 0;   // qk_nope_head_dim
  int qk_rope_head_dim = 0;   // qk_rope_head_dim
  int v_head_dim = 0;         // v_head_dim
  double rope_theta = 10000;  // rope_theta
  RopeScaling rope_scaling;   // rope_scaling / rope_parameters

  // MoE (n_routed_experts == 0: every layer is dense).
  int n_routed_experts = 0;                          // n_routed_experts
  int n_shared_experts = 0;                          // n_shared_experts
  int num_experts_per_tok = 0;                       // num_experts_per_tok
  int moe_intermediate_size = 0;                     // moe_intermediate_size
  int first_k_dense_replace = 0;                     // first_k_dense_replace
  int moe_layer_freq = 1;                            // moe_layer_freq
  TopkMethod topk_method = TopkMethod::kGreedy;      // topk_method
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;  // scoring_func
  int n_group = 1;                                   // n_group
  int topk_group = 1;                                // topk_group
  bool norm_topk_prob = false;                       // norm_topk_prob
  double routed_scaling_factor = 1.0;                // routed_scaling_factor

  // FP8 checkpoints: quantization_config.weight_block_size.
  int fp8_block_rows = 128;
  int fp8_block_cols = 128;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }  // 192
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }       // 576 per cached token
  bool is_moe_layer(int layer) const;
  // 1/sqrt(qk_head_dim) · mscale², mscale = 0.1 · mscale_all_dim · ln(factor) + 1 under YaRN; the
  // same scale serves the absorbed 576-dim decode.
  double softmax_scale() const;
  // The factor YaRN multiplies cos and sin by: mscale(factor, mscale) / mscale(factor,
  // mscale_all_dim) (1.0 for the released models).
  double rope_cos_sin_scale() const;
};

// Parses and validates; `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
// Reads DIR/config.json.
ModelConfig load_model_config(const std::string& model_dir);

// A multi-line, human-readable summary (for `mla inspect`).
std::string describe(const ModelConfig& config);

}  // namespace mla::weights
