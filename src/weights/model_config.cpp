// config.json parsing; see model_config.h.
#include "weights/model_config.h"

#include <cmath>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/mapped_file.h"

namespace mla::weights {
namespace {

// Reads `key` as an integer; absent or null gives `fallback`.
int get_int(const nlohmann::json& json, const char* key, int fallback, const std::string& source) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  const auto& value = json[key];
  if (!value.is_number_integer() || value.get<int64_t>() < INT32_MIN ||
      value.get<int64_t>() > INT32_MAX)
    throw_error("{}: '{}' must be an integer, got {}", source, key, value.dump());
  return value.get<int>();
}

int get_required_int(const nlohmann::json& json, const char* key, const std::string& source) {
  if (!json.contains(key) || json[key].is_null())
    throw_error("{}: the key '{}' is missing (a DeepSeek config.json has it)", source, key);
  return get_int(json, key, 0, source);
}

double get_double(const nlohmann::json& json, const char* key, double fallback,
                  const std::string& source) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  const auto& value = json[key];
  if (!value.is_number())
    throw_error("{}: '{}' must be a number, got {}", source, key, value.dump());
  return value.get<double>();
}

bool get_bool(const nlohmann::json& json, const char* key, bool fallback,
              const std::string& source) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  const auto& value = json[key];
  if (!value.is_boolean())
    throw_error("{}: '{}' must be true or false, got {}", source, key, value.dump());
  return value.get<bool>();
}

std::string get_string(const nlohmann::json& json, const char* key, const std::string& fallback,
                       const std::string& source) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  const auto& value = json[key];
  if (!value.is_string())
    throw_error("{}: '{}' must be a string, got {}", source, key, value.dump());
  return value.get<std::string>();
}

void require_positive(int value, const char* key, const std::string& source) {
  if (value <= 0) throw_error("{}: '{}' must be positive, got {}", source, key, value);
}

Architecture parse_architecture(const nlohmann::json& json, const std::string& source) {
  std::string listed = "none";
  if (json.contains("architectures") && json["architectures"].is_array()) {
    listed = json["architectures"].dump();
    for (const auto& entry : json["architectures"]) {
      // Compared as std::string: json == "..." is ambiguous in C++20 with newer nlohmann_json.
      const std::string name = entry.is_string() ? entry.get<std::string>() : std::string();
      if (name == "DeepseekV2ForCausalLM") return Architecture::kDeepseekV2;
      if (name == "DeepseekV3ForCausalLM") return Architecture::kDeepseekV3;
    }
  } else {
    const std::string model_type = get_string(json, "model_type", "", source);
    if (model_type == "deepseek_v2") return Architecture::kDeepseekV2;
    if (model_type == "deepseek_v3") return Architecture::kDeepseekV3;
    if (!model_type.empty()) listed = "model_type " + model_type;
  }
  throw_error(
      "{}: architectures = {}: not a model mla.cpp runs (supported: DeepseekV2ForCausalLM, "
      "DeepseekV3ForCausalLM)",
      source, listed);
}

void parse_rope(const nlohmann::json& json, const std::string& source, ModelConfig& config) {
  config.rope_theta = get_double(json, "rope_theta", 10000.0, source);
  const nlohmann::json* scaling = nullptr;
  std::string key = "rope_scaling";
  if (json.contains("rope_scaling") && json["rope_scaling"].is_object()) {
    scaling = &json["rope_scaling"];
  } else if (json.contains("rope_parameters") && json["rope_parameters"].is_object()) {
    scaling = &json["rope_parameters"];
    key = "rope_parameters";
  }
  if (scaling == nullptr) return;
  const std::string where = source + " " + key;
  config.rope_theta = get_double(*scaling, "rope_theta", config.rope_theta, where);
  std::string type = get_string(*scaling, "rope_type", "", where);
  if (type.empty()) type = get_string(*scaling, "type", "default", where);
  if (type == "default") return;
  if (type != "yarn")
    throw_error("{}: RoPE type '{}' is not supported (DeepSeek models use 'yarn' or none)", where,
                type);
  RopeScaling& rope = config.rope_scaling;
  rope.yarn = true;
  rope.factor = get_double(*scaling, "factor", 0.0, where);
  rope.original_max_position_embeddings =
      get_int(*scaling, "original_max_position_embeddings", 0, where);
  if (rope.factor == 0.0 && rope.original_max_position_embeddings > 0)
    rope.factor = double(config.max_position_embeddings) / rope.original_max_position_embeddings;
  rope.beta_fast = get_double(*scaling, "beta_fast", 32.0, where);
  rope.beta_slow = get_double(*scaling, "beta_slow", 1.0, where);
  rope.mscale = get_double(*scaling, "mscale", 1.0, where);
  rope.mscale_all_dim = get_double(*scaling, "mscale_all_dim", 0.0, where);
  rope.attention_factor = get_double(*scaling, "attention_factor", 0.0, where);
  if (!(rope.factor >= 1.0))
    throw_error("{}: YaRN 'factor' must be at least 1, got {}", where, rope.factor);
  if (rope.original_max_position_embeddings <= 0)
    throw_error("{}: YaRN needs a positive 'original_max_position_embeddings', got {}", where,
                rope.original_max_position_embeddings);
}

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

}  // namespace

const char* to_string(Architecture value) {
  return value == Architecture::kDeepseekV2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM";
}

const char* to_string(TopkMethod value) {
  switch (value) {
    case TopkMethod::kGreedy:
      return "greedy";
    case TopkMethod::kGroupLimitedGreedy:
      return "group_limited_greedy";
    case TopkMethod::kNoauxTc:
      return "noaux_tc";
  }
  return "?";
}

const char* to_string(ScoringFunc value) {
  return value == ScoringFunc::kSoftmax ? "softmax" : "sigmoid";
}

bool ModelConfig::is_moe_layer(int layer) const {
  return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
}

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope_scaling.yarn && rope_scaling.mscale_all_dim != 0.0) {
    const double mscale = yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    scale *= mscale * mscale;
  }
  return scale;
}

double ModelConfig::rope_cos_sin_scale() const {
  if (!rope_scaling.yarn) return 1.0;
  if (rope_scaling.attention_factor > 0.0) return rope_scaling.attention_factor;
  return yarn_mscale(rope_scaling.factor, rope_scaling.mscale) /
         yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
}

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw_error("{}: not a JSON object", source);
  ModelConfig config;
  config.architecture = parse_architecture(json, source);
  const bool v3 = config.architecture == Architecture::kDeepseekV3;

  config.vocab_size = get_required_int(json, "vocab_size", source);
  config.hidden_size = get_required_int(json, "hidden_size", source);
  config.num_hidden_layers = get_required_int(json, "num_hidden_layers", source);
  config.num_attention_heads = get_required_int(json, "num_attention_heads", source);
  config.intermediate_size = get_int(json, "intermediate_size", 0, source);
  config.rms_norm_eps = get_double(json, "rms_norm_eps", 1e-6, source);
  config.tie_word_embeddings = get_bool(json, "tie_word_embeddings", false, source);
  config.max_position_embeddings = get_int(json, "max_position_embeddings", 0, source);
  config.bos_token_id = get_int(json, "bos_token_id", -1, source);
  if (json.contains("eos_token_id") && json["eos_token_id"].is_array()) {
    for (const auto& id : json["eos_token_id"]) {
      if (!id.is_number_integer())
        throw_error("{}: 'eos_token_id' must hold integers, got {}", source,
                    json["eos_token_id"].dump());
      config.eos_token_ids.push_back(id.get<int>());
    }
  } else if (int eos = get_int(json, "eos_token_id", -1, source); eos >= 0) {
    config.eos_token_ids.push_back(eos);
  }

  config.q_lora_rank = get_int(json, "q_lora_rank", 0, source);
  config.kv_lora_rank = get_required_int(json, "kv_lora_rank", source);
  config.qk_nope_head_dim = get_required_int(json, "qk_nope_head_dim", source);
  config.qk_rope_head_dim = get_required_int(json, "qk_rope_head_dim", source);
  config.v_head_dim = get_required_int(json, "v_head_dim", source);
  parse_rope(json, source, config);

  config.n_routed_experts = get_int(json, "n_routed_experts", 0, source);
  config.n_shared_experts = get_int(json, "n_shared_experts", 0, source);
  config.num_experts_per_tok = get_int(json, "num_experts_per_tok", 0, source);
  config.moe_intermediate_size = get_int(json, "moe_intermediate_size", 0, source);
  config.first_k_dense_replace = get_int(json, "first_k_dense_replace", 0, source);
  config.moe_layer_freq = get_int(json, "moe_layer_freq", 1, source);
  const std::string topk_method =
      get_string(json, "topk_method", v3 ? "noaux_tc" : "greedy", source);
  if (topk_method == "greedy") {
    config.topk_method = TopkMethod::kGreedy;
  } else if (topk_method == "group_limited_greedy") {
    config.topk_method = TopkMethod::kGroupLimitedGreedy;
  } else if (topk_method == "noaux_tc") {
    config.topk_method = TopkMethod::kNoauxTc;
  } else {
    throw_error("{}: topk_method '{}' is not supported (greedy, group_limited_greedy, noaux_tc)",
                source, topk_method);
  }
  const std::string scoring = get_string(json, "scoring_func", v3 ? "sigmoid" : "softmax", source);
  if (scoring == "softmax") {
    config.scoring_func = ScoringFunc::kSoftmax;
  } else if (scoring == "sigmoid") {
    config.scoring_func = ScoringFunc::kSigmoid;
  } else {
    throw_error("{}: scoring_func '{}' is not supported (softmax, sigmoid)", source, scoring);
  }
  config.n_group = get_int(json, "n_group", 1, source);
  config.topk_group = get_int(json, "topk_group", 1, source);
  config.norm_topk_prob = get_bool(json, "norm_topk_prob", v3, source);
  config.routed_scaling_factor = get_double(json, "routed_scaling_factor", 1.0, source);

  if (json.contains("quantization_config") && json["quantization_config"].is_object()) {
    const auto& quant = json["quantization_config"];
    const std::string method =
        get_string(quant, "quant_method", "", source + " quantization_config");
    if (method != "fp8")
      throw_error("{}: quantization_config.quant_method '{}' is not supported (fp8 only)", source,
                  method);
    if (quant.contains("weight_block_size")) {
      const auto& block = quant["weight_block_size"];
      if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() ||
          !block[1].is_number_integer() || block[0].get<int>() <= 0 || block[1].get<int>() <= 0)
        throw_error("{}: quantization_config.weight_block_size must be [rows, cols], got {}",
                    source, block.dump());
      config.fp8_block_rows = block[0].get<int>();
      config.fp8_block_cols = block[1].get<int>();
    }
  }

  // Validation: what the model code relies on.
  require_positive(config.vocab_size, "vocab_size", source);
  require_positive(config.hidden_size, "hidden_size", source);
  require_positive(config.num_hidden_layers, "num_hidden_layers", source);
  require_positive(config.num_attention_heads, "num_attention_heads", source);
  require_positive(config.kv_lora_rank, "kv_lora_rank", source);
  require_positive(config.qk_nope_head_dim, "qk_nope_head_dim", source);
  require_positive(config.qk_rope_head_dim, "qk_rope_head_dim", source);
  require_positive(config.v_head_dim, "v_head_dim", source);
  if (config.q_lora_rank < 0) throw_error("{}: 'q_lora_rank' must be null or positive", source);
  if (config.qk_rope_head_dim % 2 != 0)
    throw_error("{}: 'qk_rope_head_dim' must be even (RoPE rotates pairs), got {}", source,
                config.qk_rope_head_dim);
  if (config.v_head_dim > config.kv_lora_rank)
    throw_error("{}: 'v_head_dim' ({}) larger than 'kv_lora_rank' ({}) is not supported", source,
                config.v_head_dim, config.kv_lora_rank);
  if (!(config.rms_norm_eps > 0.0)) throw_error("{}: 'rms_norm_eps' must be positive", source);
  if (get_string(json, "hidden_act", "silu", source) != "silu")
    throw_error("{}: hidden_act '{}' is not supported (DeepSeek models use silu)", source,
                get_string(json, "hidden_act", "", source));
  if (get_bool(json, "attention_bias", false, source))
    throw_error("{}: attention_bias = true is not supported (DeepSeek projections have no bias)",
                source);
  if (config.moe_layer_freq <= 0)
    throw_error("{}: 'moe_layer_freq' must be positive, got {}", source, config.moe_layer_freq);
  bool any_dense = false;
  for (int layer = 0; layer < config.num_hidden_layers; ++layer)
    any_dense = any_dense || !config.is_moe_layer(layer);
  if (any_dense) require_positive(config.intermediate_size, "intermediate_size", source);
  if (config.n_routed_experts < 0)
    throw_error("{}: 'n_routed_experts' must be null or positive", source);
  if (config.n_routed_experts > 0) {
    require_positive(config.moe_intermediate_size, "moe_intermediate_size", source);
    if (config.num_experts_per_tok < 1 || config.num_experts_per_tok > config.n_routed_experts)
      throw_error("{}: 'num_experts_per_tok' must be 1..n_routed_experts ({}), got {}", source,
                  config.n_routed_experts, config.num_experts_per_tok);
    if (config.n_shared_experts < 0)
      throw_error("{}: 'n_shared_experts' must not be negative", source);
    if (config.topk_method != TopkMethod::kGreedy) {
      if (config.n_group < 1 || config.n_routed_experts % config.n_group != 0)
        throw_error("{}: 'n_group' ({}) must divide 'n_routed_experts' ({})", source,
                    config.n_group, config.n_routed_experts);
      if (config.topk_group < 1 || config.topk_group > config.n_group)
        throw_error("{}: 'topk_group' must be 1..n_group ({}), got {}", source, config.n_group,
                    config.topk_group);
      const int group_size = config.n_routed_experts / config.n_group;
      if (config.topk_group * group_size < config.num_experts_per_tok)
        throw_error("{}: topk_group ({}) groups of {} experts cannot hold num_experts_per_tok ({})",
                    source, config.topk_group, group_size, config.num_experts_per_tok);
      if (config.topk_method == TopkMethod::kNoauxTc && group_size < 2)
        throw_error("{}: noaux_tc scores groups by their top-2 experts: groups need at least 2",
                    source);
    }
  }
  return config;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  if (!std::filesystem::exists(path))
    throw_error(
        "{}: no such file: a model directory holds config.json and *.safetensors in Hugging "
        "Face's layout",
        path);
  const std::string text = read_text_file(path);
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded()) throw_error("{}: not valid JSON", path);
  return parse_model_config(json, path);
}

std::string describe(const ModelConfig& c) {
  std::string text;
  text += fmt::format("architecture            {}\n", to_string(c.architecture));
  text += fmt::format("layers / hidden / heads {} / {} / {}\n", c.num_hidden_layers, c.hidden_size,
                      c.num_attention_heads);
  text += fmt::format("vocab                   {} (bos {}, eos {}), tied embeddings: {}\n",
                      c.vocab_size, c.bos_token_id, fmt::join(c.eos_token_ids, ","),
                      c.tie_word_embeddings ? "yes" : "no");
  text += fmt::format("q path                  {}\n",
                      c.q_lora_rank > 0 ? fmt::format("q_a_proj → {} → q_b_proj", c.q_lora_rank)
                                        : std::string("q_proj"));
  text += fmt::format("kv_lora_rank            {} (latent {} per token and layer)\n",
                      c.kv_lora_rank, c.latent_dim());
  text += fmt::format("head dims               nope {}, rope {}, v {}\n", c.qk_nope_head_dim,
                      c.qk_rope_head_dim, c.v_head_dim);
  if (c.rope_scaling.yarn) {
    text += fmt::format(
        "RoPE                    YaRN theta {} factor {} original {} beta {}/{} mscale {}/{}\n",
        c.rope_theta, c.rope_scaling.factor, c.rope_scaling.original_max_position_embeddings,
        c.rope_scaling.beta_fast, c.rope_scaling.beta_slow, c.rope_scaling.mscale,
        c.rope_scaling.mscale_all_dim);
  } else {
    text += fmt::format("RoPE                    theta {} (no scaling)\n", c.rope_theta);
  }
  text += fmt::format("softmax scale           {:.6f}\n", c.softmax_scale());
  if (c.n_routed_experts > 0) {
    text += fmt::format(
        "MoE                     {} routed + {} shared, top-{}, width {}, {} / {}, groups {}/{}, "
        "renormalise {}, scale {}\n",
        c.n_routed_experts, c.n_shared_experts, c.num_experts_per_tok, c.moe_intermediate_size,
        to_string(c.scoring_func), to_string(c.topk_method), c.topk_group, c.n_group,
        c.norm_topk_prob ? "yes" : "no", c.routed_scaling_factor);
    text += fmt::format("dense layers            first {} (width {}), then MoE every {}\n",
                        c.first_k_dense_replace, c.intermediate_size, c.moe_layer_freq);
  } else {
    text += fmt::format("MLP                     dense, width {}\n", c.intermediate_size);
  }
  text += fmt::format("rms_norm_eps            {}\n", c.rms_norm_eps);
  return text;
}

}  // namespace mla::weights
