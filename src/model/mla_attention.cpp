// The MLA layer: projections, RoPE, the latent cache write, then two attention paths.
//
// Decode rows (absorbed, "MQA mode"): q_lat = q_nope · W_UK per head (128 → kv_lora_rank), the
// query [q_lat, q_pe] (576) attends over the paged latent cache with the decode op (d_qk 576,
// d_v 512), and the latent output goes back through W_UV per head (512 → 128). Prefill rows
// (materialised, "MHA mode"): kv_b_proj up-projects the new tokens' kv_c into per-head k_nope and
// v, keys are [k_nope, k_pe] (192), causal attention; context already in the cache is gathered in
// chunks, up-projected the same way, attended non-causally and merged by LSE.
// Both paths use the same softmax scale, 192^-0.5 · mscale² (not 576^-0.5). W_UK and W_UV are
// the strided views LayerWeights::w_uk/w_uv of kv_b_proj: the absorbed matrices W_Q·W_UK and
// W_UV·W_O are never formed (for V3 they would cost ~70 GB at TP 1). The two projections of x
// are one GEMM (ModelOptions::fuse_input_projections): the query and kv_a are column views of its
// output, so q_nope, q_pe, kv_a (and V3's q_compressed) reach their ops with a wider row stride.
#include "core/error.h"
#include "model/model.h"

namespace mla::model {

Tensor Model::mla_attention(const LayerWeights& layer, const Tensor& x, Tensor& cache,
                            const StepPlan& plan) {
  const weights::ModelConfig& c = config_;
  const int64_t tokens = plan.num_tokens;
  const int64_t num_decode = plan.num_decode_tokens;
  const int64_t num_prefill = tokens - num_decode;
  const int64_t heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim;      // 128
  const int64_t rope = c.qk_rope_head_dim;      // 64
  const int64_t qk_head_dim = c.qk_head_dim();  // 192
  const int64_t v_head_dim = c.v_head_dim;      // 128
  const int64_t kv_lora_rank = c.kv_lora_rank;  // 512
  const int64_t latent_dim = c.latent_dim();    // 576
  const float eps = static_cast<float>(c.rms_norm_eps);
  const DType act = backend_.activation_dtype();

  // The projections of x: the query's first (q_proj, or q_a_proj with q_lora_rank) and
  // kv_a_proj_with_mqa's, as one GEMM into [tokens, q_out + latent_dim] whose two column blocks
  // are the parts (views with the wider row stride), or as two GEMMs (unfused).
  const Tensor& q_weight = c.q_lora_rank > 0 ? layer.q_a_proj : layer.q_proj;
  const int64_t q_out = q_weight.shape[0];
  Tensor q_first, kv_a;
  if (!layer.input_proj.empty()) {
    Tensor projected = backend_.allocate(act, {tokens, q_out + latent_dim});
    backend_.linear(x, layer.input_proj, projected);
    q_first = projected.slice(1, 0, q_out);
    kv_a = projected.slice(1, q_out, latent_dim);
  } else {
    q_first = backend_.allocate(act, {tokens, q_out});
    backend_.linear(x, q_weight, q_first);
    kv_a = backend_.allocate(act, {tokens, latent_dim});
    backend_.linear(x, layer.kv_a_proj_with_mqa, kv_a);
  }

  // Queries: [tokens, heads, nope | rope].
  Tensor q_heads;
  if (c.q_lora_rank > 0) {
    backend_.rms_norm(q_first, layer.q_a_layernorm, eps, q_first);
    Tensor q = backend_.allocate(act, {tokens, heads * qk_head_dim});
    backend_.linear(q_first, layer.q_b_proj, q);
    q_heads = q.reshape({tokens, heads, qk_head_dim});
  } else {
    q_heads = q_first.unflatten(1, heads, qk_head_dim);
  }
  // RoPE of q_pe: the prefill rows' in place (their attention reads q_heads); the decode rows'
  // go straight into the absorbed query below (rows [0, num_decode) of the step's positions).
  Tensor q_pe = q_heads.slice(2, nope, rope);
  if (num_prefill > 0) {
    Tensor q_pe_prefill = q_pe.slice(0, num_decode, num_prefill);
    backend_.rope(q_pe_prefill, rope_, num_decode, q_pe_prefill);
  }

  // The latent of every token: [kv_c after kv_a_layernorm | k_pe after RoPE], written to the cache.
  Tensor latent = backend_.allocate(act, {tokens, latent_dim});
  backend_.latent_cache_write(kv_a, layer.kv_a_layernorm, eps, rope_, latent, cache);

  Tensor attn = backend_.allocate(act, {tokens, heads, v_head_dim});
  if (num_decode > 0) {
    Tensor q_absorbed = backend_.allocate(act, {num_decode, heads, latent_dim});
    Tensor q_latent = q_absorbed.slice(2, 0, kv_lora_rank);
    backend_.head_matmul(q_heads.slice(0, 0, num_decode).slice(2, 0, nope), layer.w_uk, false,
                         q_latent);
    Tensor q_absorbed_pe = q_absorbed.slice(2, kv_lora_rank, rope);
    backend_.rope(q_pe.slice(0, 0, num_decode), rope_, 0, q_absorbed_pe);
    Tensor out_latent = backend_.allocate(act, {num_decode, heads, kv_lora_rank});
    Tensor lse = backend_.allocate(DType::kF32, {num_decode, heads});
    backend_.mla_decode(q_absorbed, cache, static_cast<int>(kv_lora_rank), softmax_scale_,
                        out_latent, lse);
    Tensor attn_decode = attn.slice(0, 0, num_decode);
    backend_.head_matmul(out_latent, layer.w_uv, true, attn_decode);
  }
  if (num_prefill > 0) {
    const Tensor q_prefill = q_heads.slice(0, num_decode, num_prefill);
    Tensor out = attn.slice(0, num_decode, num_prefill);
    Tensor lse = backend_.allocate(DType::kF32, {num_prefill, heads});
    // Keys and values of latents [count, latent_dim]: k = [kv_c · W_UKᵀ | k_pe], v = kv_c · W_UVᵀ.
    auto up_project = [&](const Tensor& latents, Tensor& keys, Tensor& kv) {
      const int64_t count = latents.shape[0];
      kv = backend_.allocate(act, {count, heads * (nope + v_head_dim)});
      backend_.linear(latents.slice(1, 0, kv_lora_rank), layer.kv_b_proj, kv);
      const Tensor kv_heads = kv.reshape({count, heads, nope + v_head_dim});
      keys = backend_.allocate(act, {count, heads, qk_head_dim});
      Tensor keys_nope = keys.slice(2, 0, nope);
      backend_.copy(kv_heads.slice(2, 0, nope), keys_nope);
      Tensor keys_pe = keys.slice(2, nope, rope);
      // k_pe is shared by all heads: a [count, heads, rope] view with head stride 0.
      const Tensor shared_pe =
          latents.slice(1, kv_lora_rank, rope).unsqueeze(1).broadcast(1, heads);
      backend_.copy(shared_pe, keys_pe);
      return kv_heads.slice(2, nope, v_head_dim);
    };
    Tensor keys, kv;
    const Tensor values = up_project(latent.slice(0, num_decode, num_prefill), keys, kv);
    backend_.attention(q_prefill, keys, values, plan.prefill_spans, softmax_scale_, out, lse);

    for (const ContextChunk& chunk : plan.context_chunks) {
      const int64_t gathered = static_cast<int64_t>(chunk.slots.size());
      Tensor context = backend_.allocate(act, {gathered, latent_dim});
      backend_.gather_latent_cache(cache, chunk.slots, context);
      Tensor context_keys, context_kv;
      const Tensor context_values = up_project(context, context_keys, context_kv);
      Tensor part_out = backend_.allocate(act, {num_prefill, heads, v_head_dim});
      Tensor part_lse = backend_.allocate(DType::kF32, {num_prefill, heads});
      backend_.attention(q_prefill, context_keys, context_values, chunk.spans, softmax_scale_,
                         part_out, part_lse);
      backend_.merge_attention(out, lse, part_out, part_lse);
    }
  }

  Tensor projected = backend_.allocate(act, {tokens, c.hidden_size});
  backend_.linear(attn.reshape({tokens, heads * v_head_dim}), layer.o_proj, projected);
  return projected;
}

}  // namespace mla::model
