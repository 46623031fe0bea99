// The Backend interface: every op the DeepSeek model runs, over tensors in the backend's memory.
// The CPU backend (cpu_backend.h) implements it over src/ref; a CUDA backend implements the same
// ops with kernels and cuBLAS, and the model code does not change.
//
// Shape of the contract: the model allocates every output through allocate() and passes it in, so
// a backend never allocates behind the model's back (a GPU backend can use an arena reset per
// step). Per-step metadata (token ids, positions, slots, the decode rows' block tables and
// lengths) arrives once, in begin_step(), which is where a GPU backend uploads it and computes the
// decode op's split plan; every layer's ops then read it from there. Spans and gather lists of
// the prefill path are members of that same StepPlan and are passed by reference.
// Shapes below: T = plan.num_tokens; every tensor's innermost dimension is contiguous.
#pragma once

#include <initializer_list>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "mla/kernels/sampling_math.h"
#include "model/step_plan.h"
#include "model/tensor.h"
#include "ref/moe_routing.h"

namespace mla::model {

// The routed experts of one MoE layer, one matrix per expert as checkpoints store them.
struct ExpertWeights {
  std::vector<Tensor> gate_proj;  // [moe_intermediate_size, hidden] each
  std::vector<Tensor> up_proj;    // [moe_intermediate_size, hidden]
  std::vector<Tensor> down_proj;  // [hidden, moe_intermediate_size]
};

// RoPE frequencies (ref::rope_inverse_frequencies) and the YaRN cos/sin factor.
struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float cos_sin_scale = 1.0f;
};

// One draw from one row of a step's logits, for a backend that samples on the device (the
// semantics are engine::TokenSampler's, with a counter-based draw: the uniform for (seed, step)
// is a pure function of both, so a recomputed sequence draws the same tokens).
struct RowSampling {
  int logit_row = 0;
  // The draw's parameters as the GPU sampler and its CPU twin take them (temperature, top-k/p,
  // min-p, penalties, logprobs, seed and step: tokens the sequence generated before this one).
  kernels::SamplingRowParams params;
  std::span<const int32_t> prompt;     // penalty context
  std::span<const int32_t> generated;  // penalty context
};

struct RowSample {
  int32_t token = 0;
  float logprob = 0.0f;                        // of the chosen token (raw logits' log-softmax)
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The dtype of activations between ops (GEMM inputs and outputs, attention tensors) and of the
  // latent cache. The residual stream, router logits, LSEs and returned logits are always kF32.
  virtual DType activation_dtype() const { return DType::kF32; }

  // --- Memory.
  virtual Tensor allocate(DType dtype, std::initializer_list<int64_t> shape) = 0;
  // A checkpoint weight, given as fp32 host values; the backend stores it in its own format.
  virtual Tensor upload_weight(const std::string& name, std::vector<float> values,
                               std::initializer_list<int64_t> shape) = 0;
  // A weight of random values ≈ Normal(0, stddev) (dummy weights for benchmarks), deterministic
  // in `seed`. The default draws on the host and uploads; a GPU backend fills on the device.
  virtual Tensor random_weight(const std::string& name, std::initializer_list<int64_t> shape,
                               uint64_t seed, float stddev);
  // A weight re-laid out at load time: a new long-lived contiguous tensor holding `src` (a
  // strided [rows, cols] view of a weight this backend holds), counted as weight memory: a
  // concat_weight_rows of one part. The model cuts the shared experts' down_proj into per-expert
  // column blocks with it.
  Tensor repack_weight(const Tensor& src) { return concat_weight_rows(std::span(&src, 1)); }
  // Empties `weight`; when that was the last reference to its memory, the memory is freed and no
  // longer counted as weight memory (a weight the model repacked and no longer needs).
  virtual void release_weight(Tensor& weight) { weight = Tensor{}; }
  // A weight stacked from `parts` along the rows: a new long-lived contiguous [Σ rows_i, cols]
  // tensor holding parts[0]'s rows, then parts[1]'s, ... (each a [rows_i, cols] weight or view
  // of one, all of one dtype and cols), counted as weight memory. The model fuses the
  // projections that read the same input into one GEMM with it.
  Tensor concat_weight_rows(std::span<const Tensor> parts);
  // A new long-lived contiguous [rows, cols] weight of `dtype`, contents undefined, counted as
  // weight memory (what concat_weight_rows fills).
  virtual Tensor new_weight(DType dtype, int64_t rows, int64_t cols) = 0;
  virtual void fill(Tensor& dst, float value) = 0;
  // Copies a tensor (any strides) to host memory, densely, in row-major order.
  virtual void copy_to_host(const Tensor& src, float* dst) = 0;

  // --- Once per step, before any op of the step, and after its last op. Tensors allocated in
  // between belong to the step: a backend may reuse their memory from the next begin_step on.
  virtual void begin_step(const StepPlan& plan) = 0;
  virtual void end_step() {}
  // The first op of every step (recorded in a step graph): where a GPU backend computes the
  // decode op's split plan from the step's device data, once for all layers.
  virtual void plan_decode() {}

  // --- Step graphs (optional: CUDA graphs). For a decode-only step padded to a batch bucket the
  // model calls begin_step(padded plan), then replay_step_graph(id) when it has a recording for
  // that (cache, bucket); otherwise, after one eager step of the same shape (first-use set-up
  // stays out of the recording), begin_graph_capture(), the step's ops, end_graph_capture(),
  // which records them and runs the recording once. A recording must stay valid when replayed
  // after a begin_step of a plan with the same shapes: per-step data lives at the same addresses.
  // end_graph_capture returns the recording's id for replay_step_graph (ids are the backend's,
  // unique across models); abort_graph_capture drops a recording cut short by an error.
  virtual bool supports_step_graphs() const { return false; }
  virtual bool replay_step_graph(int graph_id) { return false; }
  virtual void begin_graph_capture() {}
  virtual int end_graph_capture() { return 0; }
  virtual void abort_graph_capture() {}

  // --- Scratch within a step: tensors allocated after scratch_mark() may be reused by the step
  // once scratch_release(mark) is called (the model releases each layer's intermediates after
  // the layer, so a step needs one layer's worth of scratch, not all layers'). The order of
  // allocations stays deterministic, so step graphs see the same addresses on every replay.
  virtual size_t scratch_mark() { return 0; }
  virtual void scratch_release(size_t mark) {}

  // --- Dense ops.
  // out [T, hidden] = table[plan.token_ids].
  virtual void embedding(const Tensor& table, Tensor& out) = 0;
  // out [rows, d] = x / rms(x) · weight [d].
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // The residual add fused with the next norm: residual [rows, d] (kF32) += delta, then out =
  // rms_norm(residual) · weight. The default runs add then rms_norm.
  virtual void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps,
                            Tensor& out);
  // out [rows, out_features] = x [rows, in] · weightᵀ, weight [out_features, in].
  virtual void linear(const Tensor& x, const Tensor& weight, Tensor& out) = 0;
  // x += y (same shape).
  virtual void add(Tensor& x, const Tensor& y) = 0;
  // out = silu(gate) · up (same shapes).
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // dst = src (same shape; src may broadcast with stride 0).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // out [rows.size(), d] = x [.., d] rows `rows` (plan.logit_rows).
  virtual void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) = 0;
  // RoPE of rows [first_token, first_token + rows) of the step: x [rows, heads, rotary_dim] or
  // [rows, rotary_dim], row r rotated by plan.positions[first_token + r], into out (same shape,
  // its own strides). out may be x itself (in place); otherwise the two must not overlap. The
  // model ropes the decode rows' q_pe straight into the absorbed query with it.
  virtual void rope(const Tensor& x, const RopeTable& rope, int64_t first_token, Tensor& out) = 0;
  // In place, all rows of the step: x [T, heads, rotary_dim] or [T, rotary_dim].
  void rope(Tensor& x, const RopeTable& table) { rope(x, table, 0, x); }

  // --- MLA.
  // cache [num_pages, page_size, latent_dim] at plan.slot_mapping[t] = latent [T, latent_dim][t];
  // a negative slot (a padding row of a step graph) writes nothing.
  virtual void write_latent_cache(const Tensor& latent, Tensor& cache) = 0;
  // The MLA latent of every token, fused: from kv_a [T, kv_lora_rank + rotary_dim] (the
  // kv_a_proj_with_mqa output), latent [T, latent_dim] = [rms_norm(kv_c) · norm_weight |
  // rope(k_pe)], written to `latent` and to the cache at plan.slot_mapping. kv_a may be a view
  // with a row stride wider than its rows (a column block of the fused input projection). The
  // default runs rms_norm, rope (out of place) and write_latent_cache.
  virtual void latent_cache_write(const Tensor& kv_a, const Tensor& norm_weight, float eps,
                                  const RopeTable& rope, Tensor& latent, Tensor& cache);
  // out [slots.size(), latent_dim] = the cache's latents at `slots`.
  virtual void gather_latent_cache(const Tensor& cache, const std::vector<int64_t>& slots,
                                   Tensor& out) = 0;
  // Per-head matmul, all heads in one call (ref::head_matmul): a [t, h, k]; b [h, k, n] (or
  // [h, n, k] with transpose_b); out [t, h, n]. b is a strided view (W_UK, W_UV of kv_b_proj).
  virtual void head_matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) = 0;
  // The decode op over the paged latent cache for the decode rows of the plan:
  // q [num_decode, heads, latent_dim], out [num_decode, heads, kv_lora_rank], lse [num_decode,
  // heads]. d_v = kv_lora_rank: V is the first kv_lora_rank columns of the cached latent.
  virtual void mla_decode(const Tensor& q, const Tensor& cache, int head_dim_v, float softmax_scale,
                          Tensor& out, Tensor& lse) = 0;
  // Attention with LSE for each span (ref::attention): q [rows, heads, d_qk], k [keys, heads,
  // d_qk], v [keys, heads, d_v]; out [rows, heads, d_v], lse [rows, heads]. Rows no span covers
  // get out = 0, lse = -inf.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const std::vector<AttentionSpan>& spans, float softmax_scale, Tensor& out,
                         Tensor& lse) = 0;
  // Merges part (out [rows, heads, d_v], lse [rows, heads]) into (out, lse) by log-sum-exp.
  virtual void merge_attention(Tensor& out, Tensor& lse, const Tensor& part_out,
                               const Tensor& part_lse) = 0;

  // --- Sampling on the device (optional): draws `rows` from `logits` [rows, vocab] fp32 of the
  // step just run; the logits do not leave the device.
  virtual bool samples_on_device() const { return false; }
  virtual std::vector<RowSample> sample(const Tensor& logits, std::span<const RowSampling> rows);

  // --- MoE.
  // router_logits [T, experts] fp32; correction_bias [experts] or empty; expert_ids [T, pairs]
  // i32, expert_weights [T, pairs] fp32, pairs = top_k + params.appended_experts (the folded
  // shared experts: ids experts.., weight 1, after the routed pairs; ref::route_experts).
  virtual void moe_route(const Tensor& router_logits, const Tensor& correction_bias,
                         const ref::MoeRoutingParams& params, Tensor& expert_ids,
                         Tensor& expert_weights) = 0;
  // out [T, hidden] = Σ_k expert_weights[t][k] · expert_{ids[t][k]}(x[t]); with `accumulate`,
  // out += that sum (the shared experts' output already there: one pass instead of an add).
  // `experts` may hold more experts than the router scores (the folded shared experts).
  virtual void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                           const ExpertWeights& experts, bool accumulate, Tensor& out) = 0;
};

}  // namespace mla::model
