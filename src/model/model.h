// The DeepSeek model (V2, V2-Lite, V3, R1) on a Backend: weights, the paged latent cache, and one
// forward step over a flat batch of tokens.
//
// Per layer: RMSNorm → MLA → residual → RMSNorm → dense MLP (the first first_k_dense_replace
// layers) or MoE (router, routed experts, shared experts) → residual; then the final norm and
// lm_head on the rows whose logits are asked for. MLA writes every token's latent (kv_c after
// kv_a_layernorm, k_pe after RoPE) into the paged cache first, then runs the absorbed decode path
// for decode rows and the materialised prefill path (with chunked context) for the rest
// (mla_attention.cpp says how). The subtle invariant: W_UK and W_UV are views of kv_b_proj's
// weight and are never multiplied into W_Q or W_O; the backend holds exactly the checkpoint's
// tensors (some stacked or cut at load: as many elements, no product of two).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/step_plan.h"
#include "model/tensor.h"
#include "weights/checkpoint.h"
#include "weights/model_config.h"

namespace mla::model {

struct ModelOptions {
  // Cached latents gathered per chunk when a prefill attends to context already in the cache
  // (the workspace is [chunk, latent_dim] plus its up-projection [chunk, heads, 256]).
  int context_chunk_tokens = 4096;
  // Step graphs (CUDA graphs) for decode-only steps, on backends that have them: one recording
  // per batch bucket (1, 2, 4, 8, 16, 24, 32, then steps of 16 up to max_graph_batch), replayed
  // with the step's data. Steps that are not decode-only, are larger than max_graph_batch or have
  // a sequence longer than graph_max_context tokens run eagerly. false: always eager (debugging).
  bool step_graphs = true;
  int max_graph_batch = 256;
  int graph_max_context = 16384;
  // The shared experts of a MoE layer run inside the routed experts' op (Backend::moe_experts) as
  // n_shared_experts extra experts of moe_intermediate_size each, which the router appends to
  // every token with weight 1 (ref::MoeRoutingParams::appended_experts); their output is summed
  // with the routed experts' in fp32. false: a separate MLP whose output the routed sum is added
  // onto. Read at load (the folded layout holds shared_down_proj cut into per-expert copies).
  bool fold_shared_experts = true;
  // The two projections that read the layer's input run as one GEMM: q_proj (q_a_proj when
  // q_lora_rank > 0) and kv_a_proj_with_mqa stacked along the output rows at load
  // (LayerWeights::input_proj, the originals released: the weight bytes stay the checkpoint's);
  // the query and kv_a parts of its output are column views, which every op downstream takes
  // with their wider row stride. false: two GEMMs (A/B). Read at load.
  bool fuse_input_projections = true;
};

// One layer's weights; names as in the checkpoint (model.layers.N.<name>).
struct LayerWeights {
  Tensor input_layernorm;           // input_layernorm.weight [hidden]
  Tensor post_attention_layernorm;  // post_attention_layernorm.weight [hidden]
  // MLA.
  Tensor q_proj;              // self_attn.q_proj.weight [heads·192, hidden] (q_lora_rank null)
  Tensor q_a_proj;            // self_attn.q_a_proj.weight [q_lora_rank, hidden]
  Tensor q_a_layernorm;       // self_attn.q_a_layernorm.weight [q_lora_rank]
  Tensor q_b_proj;            // self_attn.q_b_proj.weight [heads·192, q_lora_rank]
  Tensor kv_a_proj_with_mqa;  // self_attn.kv_a_proj_with_mqa.weight [kv_lora_rank + 64, hidden]
  Tensor kv_a_layernorm;      // self_attn.kv_a_layernorm.weight [kv_lora_rank]
  Tensor kv_b_proj;           // self_attn.kv_b_proj.weight [heads·(128 + 128), kv_lora_rank]
  Tensor w_uk;                // view of kv_b_proj: [heads, 128, kv_lora_rank] (rows 0..127)
  Tensor w_uv;                // view of kv_b_proj: [heads, 128, kv_lora_rank] (rows 128..255)
  Tensor o_proj;              // self_attn.o_proj.weight [hidden, heads·128]
  // With ModelOptions::fuse_input_projections: [q_out + kv_lora_rank + 64, hidden], q_proj's (or
  // q_a_proj's) q_out rows then kv_a_proj_with_mqa's; those two are then row views of it.
  Tensor input_proj;
  // Dense MLP (or the shared experts of a MoE layer).
  bool is_moe = false;
  Tensor gate_proj, up_proj, down_proj;  // mlp.{gate,up,down}_proj.weight
  // MoE.
  Tensor router;                   // mlp.gate.weight [n_routed_experts, hidden]
  Tensor e_score_correction_bias;  // mlp.gate.e_score_correction_bias [n_routed_experts]
  ExpertWeights experts;           // mlp.experts.E.{gate,up,down}_proj.weight
  Tensor shared_gate_proj, shared_up_proj, shared_down_proj;  // mlp.shared_experts.*
  // With ModelOptions::fold_shared_experts: `experts` ends with n_shared_experts more, expert
  // n_routed_experts + j being the shared experts' slice j of moe_intermediate_size: gate and up
  // are row views of shared_gate_proj / shared_up_proj, down a contiguous copy of
  // shared_down_proj's column block j (which is then released: shared_down_proj is empty).
  int folded_shared_experts = 0;
};

// The latent cache: per layer [num_pages, page_size, kv_lora_rank + qk_rope_head_dim].
struct LatentCache {
  int num_pages = 0;
  int page_size = 64;
  std::vector<Tensor> layers;
};

class Model {
 public:
  // Called after each layer's weights are on the backend: (layers loaded, layers in all).
  using LoadProgress = std::function<void(int, int)>;

  // Where the weights come from: (checkpoint name, shape) -> the tensor on the backend.
  using WeightSource =
      std::function<Tensor(const std::string& name, std::initializer_list<int64_t> shape)>;

  // Loads a model directory onto `backend`, which must outlive the model.
  static std::unique_ptr<Model> load(const std::string& model_dir, Backend& backend,
                                     const ModelOptions& options = {},
                                     const LoadProgress& progress = {});
  // Random weights of the config's shapes (--load-format dummy): linear weights ~ N(0, 1/in),
  // norm weights 1, the MoE correction bias 0; made on the backend, no file read. For measuring
  // speed and memory of a full-size model without its checkpoint.
  static std::unique_ptr<Model> dummy(const weights::ModelConfig& config, Backend& backend,
                                      const ModelOptions& options = {},
                                      const LoadProgress& progress = {}, uint64_t seed = 0);
  Model(const weights::Checkpoint& checkpoint, Backend& backend, const ModelOptions& options,
        const LoadProgress& progress = {});
  Model(const weights::ModelConfig& config, const WeightSource& weights, Backend& backend,
        const ModelOptions& options, const LoadProgress& progress = {});

  const weights::ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  // Step graphs on or off for the steps that follow (ModelOptions::step_graphs); recordings are
  // kept, so turning them back on replays them.
  void set_step_graphs(bool on) { options_.step_graphs = on; }
  Backend& backend() { return backend_; }
  const LayerWeights& layer(int index) const { return layers_.at(index); }

  LatentCache allocate_cache(int num_pages, int page_size = 64);
  // Copies page `src` of every layer's cache over page `dst` (an engine's copy-on-write of a
  // shared page, before the step that writes into the copy).
  void copy_cache_page(LatentCache& cache, int32_t src, int32_t dst);

  // One step over a flat batch (see step_plan.h for the contract); returns the logits of
  // batch.logit_rows, [logit_rows, vocab_size] fp32 in the backend's memory.
  Tensor forward(const ForwardBatch& batch, LatentCache& cache);

  // The batch bucket a decode-only step of `rows` rows is padded to (0: none, run eagerly).
  int graph_bucket(int rows) const;

 private:
  Tensor run_layers(const StepPlan& plan, LatentCache& cache);
  Tensor mla_attention(const LayerWeights& layer, const Tensor& x, Tensor& cache,
                       const StepPlan& plan);
  Tensor mlp(const Tensor& x, const Tensor& gate_proj, const Tensor& up_proj,
             const Tensor& down_proj);
  Tensor moe(const LayerWeights& layer, const Tensor& x);
  void load_layer(const WeightSource& weights, int index);

  weights::ModelConfig config_;
  ModelOptions options_;
  Backend& backend_;
  Tensor embed_tokens_;  // model.embed_tokens.weight [vocab, hidden]
  Tensor final_norm_;    // model.norm.weight [hidden]
  Tensor lm_head_;       // lm_head.weight [vocab, hidden] (embed_tokens when tied)
  std::vector<LayerWeights> layers_;
  RopeTable rope_;
  float softmax_scale_ = 0.f;
  ref::MoeRoutingParams routing_;
  // Step graphs: the logits tensor each recording leaves, by (cache, bucket) key.
  // Step graphs: by (every layer's cache address, pages, bucket), the backend's recording id
  // (0: warmed up by one eager step, not recorded yet) and the logits tensor it leaves.
  struct GraphKey {
    std::vector<const void*> cache_layers;
    int num_pages = 0;
    int bucket = 0;
    auto operator<=>(const GraphKey&) const = default;
  };
  struct StepGraph {
    int id = 0;
    Tensor logits;
  };
  std::map<GraphKey, StepGraph> graphs_;
};

}  // namespace mla::model
