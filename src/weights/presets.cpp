// The presets of presets.h: each one config.json, verbatim in the values that matter.
#include "weights/presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mla::weights {
namespace {

struct Preset {
  const char* name;
  const char* config_json;
};

// deepseek-ai/DeepSeek-V2-Lite: 15.7 B parameters (2.4 B active), 27 layers, MLA without query
// compression, 64 routed experts (top 6) + 2 shared, the first layer dense.
constexpr const char* kDeepseekV2Lite = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
  "attention_bias": false, "aux_loss_alpha": 0.001, "bos_token_id": 100000,
  "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
  "n_shared_experts": 2, "norm_topk_prob": false, "num_attention_heads": 16,
  "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
  "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 102400
})";

// deepseek-ai/DeepSeek-V3 (and R1, same shapes): 671 B parameters (37 B active), 61 layers,
// query compression to 1536, 256 routed experts (top 8 of the best 4 of 8 groups) + 1 shared,
// the first three layers dense. (Shapes only: it does not fit one H200 in bf16.)
constexpr const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1, "first_k_dense_replace": 3,
  "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
  "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
})";

constexpr Preset kPresets[] = {{"deepseek-v2-lite", kDeepseekV2Lite}, {"deepseek-v3", kDeepseekV3}};

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const Preset& preset : kPresets)
    if (name == preset.name)
      return parse_model_config(nlohmann::json::parse(preset.config_json),
                                fmt::format("model preset {}", name));
  throw_error("unknown model preset '{}' (known: {})", name, fmt::join(model_preset_names(), ", "));
}

}  // namespace mla::weights
