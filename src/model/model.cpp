// Model loading and the forward step; the MLA layer itself is in mla_attention.cpp.
#include "model/model.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "ref/rope.h"

namespace mla::model {
namespace {

using weights::Checkpoint;

uint64_t name_seed(const std::string& name, uint64_t seed) {
  uint64_t hash = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& model_dir, Backend& backend,
                                   const ModelOptions& options, const LoadProgress& progress) {
  const Checkpoint checkpoint = Checkpoint::open(model_dir);
  return std::make_unique<Model>(checkpoint, backend, options, progress);
}

std::unique_ptr<Model> Model::dummy(const weights::ModelConfig& config, Backend& backend,
                                    const ModelOptions& options, const LoadProgress& progress,
                                    uint64_t seed) {
  const WeightSource source = [&backend, seed](const std::string& name,
                                               std::initializer_list<int64_t> shape) {
    if (shape.size() == 1) {
      const bool bias = name.find("e_score_correction_bias") != std::string::npos;
      return backend.upload_weight(name, std::vector<float>(*shape.begin(), bias ? 0.0f : 1.0f),
                                   shape);
    }
    const float in_features = static_cast<float>(*(shape.begin() + 1));
    return backend.random_weight(name, shape, name_seed(name, seed), 1.0f / std::sqrt(in_features));
  };
  return std::make_unique<Model>(config, source, backend, options, progress);
}

Model::Model(const Checkpoint& checkpoint, Backend& backend, const ModelOptions& options,
             const LoadProgress& progress)
    : Model(
          checkpoint.config(),
          [&checkpoint, &backend](const std::string& name, std::initializer_list<int64_t> shape) {
            return backend.upload_weight(
                name, checkpoint.read_f32(name, std::vector<int64_t>(shape)), shape);
          },
          backend, options, progress) {}

Model::Model(const weights::ModelConfig& config, const WeightSource& weights, Backend& backend,
             const ModelOptions& options, const LoadProgress& progress)
    : config_(config), options_(options), backend_(backend) {
  if (options_.context_chunk_tokens <= 0)
    throw_error("model options: context_chunk_tokens must be positive, got {}",
                options_.context_chunk_tokens);
  const weights::ModelConfig& c = config_;
  const int64_t vocab = c.vocab_size;
  const int64_t hidden = c.hidden_size;
  embed_tokens_ = weights("model.embed_tokens.weight", {vocab, hidden});
  final_norm_ = weights("model.norm.weight", {hidden});
  lm_head_ = c.tie_word_embeddings ? embed_tokens_ : weights("lm_head.weight", {vocab, hidden});
  layers_.resize(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    load_layer(weights, i);
    if (progress) progress(i + 1, c.num_hidden_layers);
  }

  ref::RopeParams rope;
  rope.rotary_dim = c.qk_rope_head_dim;
  rope.theta = c.rope_theta;
  rope.yarn = c.rope_scaling.yarn;
  rope.factor = c.rope_scaling.factor;
  rope.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  rope.beta_fast = c.rope_scaling.beta_fast;
  rope.beta_slow = c.rope_scaling.beta_slow;
  rope_.inv_freq = ref::rope_inverse_frequencies(rope);
  rope_.cos_sin_scale = static_cast<float>(c.rope_cos_sin_scale());
  softmax_scale_ = static_cast<float>(c.softmax_scale());

  routing_.num_experts = c.n_routed_experts;
  routing_.top_k = c.num_experts_per_tok;
  routing_.n_group = c.n_group;
  routing_.topk_group = c.topk_group;
  routing_.scoring = c.scoring_func == weights::ScoringFunc::kSoftmax ? ref::MoeScoring::kSoftmax
                                                                      : ref::MoeScoring::kSigmoid;
  routing_.method = c.topk_method == weights::TopkMethod::kGreedy ? ref::MoeTopk::kGreedy
                    : c.topk_method == weights::TopkMethod::kGroupLimitedGreedy
                        ? ref::MoeTopk::kGroupLimitedGreedy
                        : ref::MoeTopk::kNoauxTc;
  routing_.normalize = c.norm_topk_prob;
  routing_.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  routing_.scale_when_normalized = c.architecture == weights::Architecture::kDeepseekV3;
}

void Model::load_layer(const WeightSource& weights, int index) {
  const weights::ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t heads = c.num_attention_heads;
  const int64_t qk_head_dim = c.qk_head_dim();
  const int64_t kv_lora_rank = c.kv_lora_rank;
  const std::string prefix = fmt::format("model.layers.{}.", index);
  auto load = [&](const std::string& name, std::initializer_list<int64_t> shape) {
    return weights(prefix + name, shape);
  };
  LayerWeights& layer = layers_[index];
  layer.input_layernorm = load("input_layernorm.weight", {hidden});
  layer.post_attention_layernorm = load("post_attention_layernorm.weight", {hidden});
  if (c.q_lora_rank > 0) {
    layer.q_a_proj = load("self_attn.q_a_proj.weight", {c.q_lora_rank, hidden});
    layer.q_a_layernorm = load("self_attn.q_a_layernorm.weight", {c.q_lora_rank});
    layer.q_b_proj = load("self_attn.q_b_proj.weight", {heads * qk_head_dim, c.q_lora_rank});
  } else {
    layer.q_proj = load("self_attn.q_proj.weight", {heads * qk_head_dim, hidden});
  }
  layer.kv_a_proj_with_mqa =
      load("self_attn.kv_a_proj_with_mqa.weight", {kv_lora_rank + c.qk_rope_head_dim, hidden});
  layer.kv_a_layernorm = load("self_attn.kv_a_layernorm.weight", {kv_lora_rank});
  if (options_.fuse_input_projections) {
    // One weight for the two GEMMs that read x; the originals become row views of it.
    Tensor& q_part = c.q_lora_rank > 0 ? layer.q_a_proj : layer.q_proj;
    const int64_t q_rows = q_part.shape[0];
    const int64_t kv_a_rows = layer.kv_a_proj_with_mqa.shape[0];
    {
      const Tensor parts[] = {q_part, layer.kv_a_proj_with_mqa};
      layer.input_proj = backend_.concat_weight_rows(parts);
    }
    backend_.release_weight(q_part);
    backend_.release_weight(layer.kv_a_proj_with_mqa);
    q_part = layer.input_proj.slice(0, 0, q_rows);
    layer.kv_a_proj_with_mqa = layer.input_proj.slice(0, q_rows, kv_a_rows);
  }
  const int64_t per_head = c.qk_nope_head_dim + c.v_head_dim;
  layer.kv_b_proj = load("self_attn.kv_b_proj.weight", {heads * per_head, kv_lora_rank});
  // W_UK and W_UV: strided views into kv_b_proj, nothing copied or multiplied.
  const Tensor kv_b_heads = layer.kv_b_proj.reshape({heads, per_head, kv_lora_rank});
  layer.w_uk = kv_b_heads.slice(1, 0, c.qk_nope_head_dim);
  layer.w_uv = kv_b_heads.slice(1, c.qk_nope_head_dim, c.v_head_dim);
  layer.o_proj = load("self_attn.o_proj.weight", {hidden, heads * c.v_head_dim});

  layer.is_moe = c.is_moe_layer(index);
  if (!layer.is_moe) {
    const int64_t width = c.intermediate_size;
    layer.gate_proj = load("mlp.gate_proj.weight", {width, hidden});
    layer.up_proj = load("mlp.up_proj.weight", {width, hidden});
    layer.down_proj = load("mlp.down_proj.weight", {hidden, width});
    return;
  }
  const int64_t experts = c.n_routed_experts;
  const int64_t width = c.moe_intermediate_size;
  layer.router = load("mlp.gate.weight", {experts, hidden});
  if (c.topk_method == weights::TopkMethod::kNoauxTc)
    layer.e_score_correction_bias = load("mlp.gate.e_score_correction_bias", {experts});
  for (int64_t e = 0; e < experts; ++e) {
    const std::string expert = fmt::format("mlp.experts.{}.", e);
    layer.experts.gate_proj.push_back(load(expert + "gate_proj.weight", {width, hidden}));
    layer.experts.up_proj.push_back(load(expert + "up_proj.weight", {width, hidden}));
    layer.experts.down_proj.push_back(load(expert + "down_proj.weight", {hidden, width}));
  }
  if (c.n_shared_experts > 0) {
    const int64_t shared_width = width * c.n_shared_experts;
    layer.shared_gate_proj = load("mlp.shared_experts.gate_proj.weight", {shared_width, hidden});
    layer.shared_up_proj = load("mlp.shared_experts.up_proj.weight", {shared_width, hidden});
    layer.shared_down_proj = load("mlp.shared_experts.down_proj.weight", {hidden, shared_width});
    if (options_.fold_shared_experts) {
      // Virtual expert j: gate/up rows [j·width, (j+1)·width) (contiguous views), down columns
      // [j·width, (j+1)·width) of [hidden, shared_width] (strided, so copied out, unless it is the
      // whole tensor: one shared expert, as in V3).
      for (int64_t j = 0; j < c.n_shared_experts; ++j) {
        layer.experts.gate_proj.push_back(layer.shared_gate_proj.slice(0, j * width, width));
        layer.experts.up_proj.push_back(layer.shared_up_proj.slice(0, j * width, width));
        const Tensor down = layer.shared_down_proj.slice(1, j * width, width);
        layer.experts.down_proj.push_back(down.is_contiguous() ? down
                                                               : backend_.repack_weight(down));
      }
      backend_.release_weight(layer.shared_down_proj);
      layer.folded_shared_experts = c.n_shared_experts;
    }
  }
}

LatentCache Model::allocate_cache(int num_pages, int page_size) {
  if (num_pages <= 0 || page_size <= 0)
    throw_error("latent cache: need positive pages and page size, got {} pages of {}", num_pages,
                page_size);
  LatentCache cache;
  cache.num_pages = num_pages;
  cache.page_size = page_size;
  for (int i = 0; i < config_.num_hidden_layers; ++i)
    cache.layers.push_back(backend_.allocate(backend_.activation_dtype(),
                                             {num_pages, page_size, config_.latent_dim()}));
  return cache;
}

void Model::copy_cache_page(LatentCache& cache, int32_t src, int32_t dst) {
  if (src < 0 || src >= cache.num_pages || dst < 0 || dst >= cache.num_pages || src == dst)
    throw_error("latent cache: cannot copy page {} to page {} (pages 0..{}, distinct)", src, dst,
                cache.num_pages - 1);
  for (Tensor& layer : cache.layers) {
    Tensor to = layer.slice(0, dst, 1);
    backend_.copy(layer.slice(0, src, 1), to);
  }
}

namespace {

// Ends the step however the forward pass leaves (the backend then frees the step's memory).
class StepGuard {
 public:
  StepGuard(Backend& backend, const StepPlan& plan) : backend_(backend) {
    backend_.begin_step(plan);
  }
  ~StepGuard() { backend_.end_step(); }
  StepGuard(const StepGuard&) = delete;
  StepGuard& operator=(const StepGuard&) = delete;

 private:
  Backend& backend_;
};

}  // namespace

Tensor Model::forward(const ForwardBatch& batch, LatentCache& cache) {
  MLA_CHECK_EQ(static_cast<int>(cache.layers.size()), config_.num_hidden_layers);
  StepPlan plan = make_step_plan(batch, {cache.num_pages, cache.page_size}, config_.vocab_size,
                                 options_.context_chunk_tokens);
  plan.decode_num_heads = config_.num_attention_heads;
  const int max_pages = (options_.graph_max_context + cache.page_size - 1) / cache.page_size;
  const bool decode_only = plan.num_decode_tokens == plan.num_tokens;
  const int bucket =
      decode_only && plan.decode_max_pages <= max_pages ? graph_bucket(plan.num_tokens) : 0;
  if (bucket == 0) {
    StepGuard step(backend_, plan);
    return run_layers(plan, cache);
  }
  // A step graph: the plan padded to the bucket; the first step of a (cache, bucket) runs
  // eagerly (first-use set-up: weights' device tables, cuBLAS, module loading), the second is
  // recorded, the later ones replay the recording.
  const StepPlan padded = pad_decode_plan(plan, bucket, max_pages);
  GraphKey key;
  for (const Tensor& layer : cache.layers) key.cache_layers.push_back(layer.data);
  key.num_pages = cache.num_pages;
  key.bucket = bucket;
  const int64_t rows = static_cast<int64_t>(plan.logit_rows.size());
  StepGuard step(backend_, padded);
  auto it = graphs_.find(key);
  if (it != graphs_.end() && it->second.id != 0 && backend_.replay_step_graph(it->second.id))
    return it->second.logits.slice(0, 0, rows);
  if (it == graphs_.end()) {
    graphs_[key] = StepGraph{};
    return run_layers(padded, cache).slice(0, 0, rows);
  }
  backend_.begin_graph_capture();
  Tensor logits;
  try {
    logits = run_layers(padded, cache);
  } catch (...) {
    backend_.abort_graph_capture();
    throw;
  }
  it->second.id = backend_.end_graph_capture();
  it->second.logits = logits;
  return logits.slice(0, 0, rows);
}

int Model::graph_bucket(int rows) const {
  if (!options_.step_graphs || !backend_.supports_step_graphs()) return 0;
  if (rows < 1 || rows > options_.max_graph_batch) return 0;
  for (int bucket : {1, 2, 4, 8, 16, 24, 32})
    if (rows <= bucket) return std::min(bucket, options_.max_graph_batch);
  return std::min((rows + 15) / 16 * 16, options_.max_graph_batch);
}

Tensor Model::run_layers(const StepPlan& plan, LatentCache& cache) {
  const int64_t tokens = plan.num_tokens;
  const int64_t hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);

  backend_.plan_decode();
  // The residual stream x is fp32; each residual add is fused with the norm that follows it.
  Tensor x = backend_.allocate(DType::kF32, {tokens, hidden});
  backend_.embedding(embed_tokens_, x);
  Tensor normed = backend_.allocate(backend_.activation_dtype(), {tokens, hidden});
  const int num_layers = config_.num_hidden_layers;
  if (num_layers > 0) backend_.rms_norm(x, layers_[0].input_layernorm, eps, normed);
  for (int i = 0; i < num_layers; ++i) {
    const LayerWeights& layer = layers_[i];
    // The layer's intermediates are dead once its output is in x and normed.
    const size_t scratch = backend_.scratch_mark();
    backend_.add_rms_norm(x, mla_attention(layer, normed, cache.layers[i], plan),
                          layer.post_attention_layernorm, eps, normed);
    const Tensor mlp_out = layer.is_moe
                               ? moe(layer, normed)
                               : mlp(normed, layer.gate_proj, layer.up_proj, layer.down_proj);
    if (i + 1 < num_layers)
      backend_.add_rms_norm(x, mlp_out, layers_[i + 1].input_layernorm, eps, normed);
    else
      backend_.add(x, mlp_out);
    backend_.scratch_release(scratch);
  }

  const int64_t rows = static_cast<int64_t>(plan.logit_rows.size());
  Tensor selected = backend_.allocate(DType::kF32, {rows, hidden});
  backend_.gather_rows(x, plan.logit_rows, selected);
  Tensor final_hidden = backend_.allocate(backend_.activation_dtype(), {rows, hidden});
  backend_.rms_norm(selected, final_norm_, eps, final_hidden);
  Tensor logits = backend_.allocate(DType::kF32, {rows, config_.vocab_size});
  backend_.linear(final_hidden, lm_head_, logits);
  return logits;
}

Tensor Model::mlp(const Tensor& x, const Tensor& gate_proj, const Tensor& up_proj,
                  const Tensor& down_proj) {
  const int64_t tokens = x.shape[0];
  const int64_t width = gate_proj.shape[0];
  const DType act = backend_.activation_dtype();
  Tensor gate = backend_.allocate(act, {tokens, width});
  Tensor up = backend_.allocate(act, {tokens, width});
  backend_.linear(x, gate_proj, gate);
  backend_.linear(x, up_proj, up);
  backend_.silu_mul(gate, up, gate);
  Tensor out = backend_.allocate(act, {tokens, config_.hidden_size});
  backend_.linear(gate, down_proj, out);
  return out;
}

Tensor Model::moe(const LayerWeights& layer, const Tensor& x) {
  const int64_t tokens = x.shape[0];
  // Folded shared experts: the router appends them to every token's pairs (weight 1).
  ref::MoeRoutingParams routing = routing_;
  routing.appended_experts = layer.folded_shared_experts;
  const int64_t pairs = config_.num_experts_per_tok + routing.appended_experts;
  // The router runs in fp32 whatever the backend's storage (as DeepSeek's and HF's code do).
  Tensor router_logits = backend_.allocate(DType::kF32, {tokens, config_.n_routed_experts});
  backend_.linear(x, layer.router, router_logits);
  Tensor expert_ids = backend_.allocate(DType::kI32, {tokens, pairs});
  Tensor expert_weights = backend_.allocate(DType::kF32, {tokens, pairs});
  backend_.moe_route(router_logits, layer.e_score_correction_bias, routing, expert_ids,
                     expert_weights);
  // Unfolded shared experts first; the routed experts' weighted sum is added onto their output.
  const bool shared = !layer.shared_down_proj.empty();
  Tensor out = shared
                   ? mlp(x, layer.shared_gate_proj, layer.shared_up_proj, layer.shared_down_proj)
                   : backend_.allocate(backend_.activation_dtype(), {tokens, config_.hidden_size});
  backend_.moe_experts(x, expert_ids, expert_weights, layer.experts, /*accumulate=*/shared, out);
  return out;
}

}  // namespace mla::model
