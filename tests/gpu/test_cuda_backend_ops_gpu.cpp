// The CUDA backend op by op against the CPU backend, on the same bf16-rounded random inputs, in
// one step of a batch with decode rows and a prefill row with cached context (so the step's
// uploads, spans and gather lists are the real ones). When the whole-model test
// (test_cuda_backend_gpu.cpp) disagrees with Hugging Face, this one says which op does.
// Tolerance: relative L2 of the fp32 results ≤ 1e-2 (bf16 outputs round at 2^-9 relative; the
// CPU side is fp32/double on the same rounded inputs); routing ids must match exactly. Then the
// op profiler (CudaBackend::set_op_profiling) on whole steps of the tiny V2-Lite fixture.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "cuda/device.h"
#include "cuda/tuned_gemm.h"
#include "gpu_test_support.h"
#include "model/cpu_backend.h"
#include "model/cuda_backend.h"
#include "model/model.h"
#include "model/step_plan.h"
#include "model/synthetic_batch.h"
#include "tests/model_golden_support.h"

namespace mla {
namespace {

using model::DType;
using model::Tensor;

constexpr double kMaxRelativeL2 = 1e-2;

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    err += d * d;
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

std::vector<float> host(model::Backend& backend, const Tensor& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  backend.copy_to_host(t, values.data());
  return values;
}

// The two backends side by side, with one step planned on both.
struct Backends {
  model::CpuBackend cpu;
  model::CudaBackend cuda;
  std::mt19937 rng{42};

  std::vector<float> random(int64_t count, float scale) {
    std::normal_distribution<float> normal(0.f, scale);
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = round_to_bf16(normal(rng));
    return values;
  }
  // The same values on both (weights-style upload: bf16 on CUDA, fp32 on the CPU).
  std::pair<Tensor, Tensor> input2(const char* name, int64_t rows, int64_t cols, float scale) {
    const std::vector<float> v = random(rows * cols, scale);
    return {cpu.upload_weight(name, v, {rows, cols}), cuda.upload_weight(name, v, {rows, cols})};
  }
  std::pair<Tensor, Tensor> input3(const char* name, int64_t a, int64_t b, int64_t c, float scale) {
    const std::vector<float> v = random(a * b * c, scale);
    return {cpu.upload_weight(name, v, {a, b, c}), cuda.upload_weight(name, v, {a, b, c})};
  }
  void expect_close(const char* what, const Tensor& got_cuda, const Tensor& want_cpu) {
    const double error = relative_l2(host(cuda, got_cuda), host(cpu, want_cpu));
    std::printf("[ ops      ] %-22s relative L2 %.2e\n", what, error);
    EXPECT_LE(error, kMaxRelativeL2) << what;
  }
};

// Two decode rows (70 and 5 cached tokens) and a prefill row of 6 new tokens after 90 cached.
model::ForwardBatch make_batch() {
  model::ForwardBatch batch;
  auto add = [&](int cached, int count, std::vector<int32_t> pages) {
    model::SequenceSlice slice;
    slice.first_token = static_cast<int>(batch.token_ids.size());
    slice.num_tokens = count;
    slice.num_cached = cached;
    slice.block_table = pages;
    for (int j = 0; j < count; ++j) {
      const int position = cached + j;
      batch.token_ids.push_back(3 + 7 * (position % 31));
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(int64_t(pages[position / 64]) * 64 + position % 64);
    }
    batch.sequences.push_back(slice);
  };
  add(70, 1, {6, 2});
  add(5, 1, {4});
  add(90, 6, {1, 7});
  batch.logit_rows = {0, 1, 7};
  return batch;
}

TEST(CudaBackendOps, EveryOpMatchesTheCpuBackend) {
  MLA_REQUIRE_SM90_GPU();
  Backends b;
  const int64_t heads = 4, hidden = 64, latent = 576, rank = 512, rope = 64, pages = 8;
  const int64_t tokens = 8, decode = 2, prefill = 6;

  // Weights and the cache (uploaded, so both sides hold identical values).
  auto [w_cpu, w_cuda] = b.input2("w", 48, hidden, 0.2f);
  auto [norm_cpu, norm_cuda] = b.input2("norm", 1, latent, 0.3f);
  auto [kv_b_cpu, kv_b_cuda] = b.input2("kv_b", heads * 256, rank, 0.05f);
  auto [cache_cpu, cache_cuda] = b.input3("cache", pages, 64, latent, 1.0f);
  auto [router_cpu, router_cuda] = b.input2("router", 16, hidden, 0.3f);
  const std::vector<float> bias = b.random(16, 0.1f);
  const Tensor bias_cpu = b.cpu.upload_weight("mlp.gate.e_score_correction_bias", bias, {16});
  const Tensor bias_cuda = b.cuda.upload_weight("mlp.gate.e_score_correction_bias", bias, {16});
  model::ExpertWeights experts_cpu, experts_cuda;
  for (int e = 0; e < 16; ++e) {
    auto [g_cpu, g_cuda] = b.input2("gate", 32, hidden, 0.2f);
    auto [u_cpu, u_cuda] = b.input2("up", 32, hidden, 0.2f);
    auto [d_cpu, d_cuda] = b.input2("down", hidden, 32, 0.2f);
    experts_cpu.gate_proj.push_back(g_cpu);
    experts_cpu.up_proj.push_back(u_cpu);
    experts_cpu.down_proj.push_back(d_cpu);
    experts_cuda.gate_proj.push_back(g_cuda);
    experts_cuda.up_proj.push_back(u_cuda);
    experts_cuda.down_proj.push_back(d_cuda);
  }
  model::RopeTable rope_table;
  for (int i = 0; i < rope / 2; ++i)
    rope_table.inv_freq.push_back(std::pow(10000.f, -2.f * i / rope));
  rope_table.cos_sin_scale = 1.0f;

  const model::ForwardBatch batch = make_batch();
  model::StepPlan plan = model::make_step_plan(batch, {int(pages), 64}, 256, /*chunk=*/40);
  plan.decode_num_heads = static_cast<int>(heads);
  b.cpu.begin_step(plan);
  b.cuda.begin_step(plan);
  b.cuda.plan_decode();
  // Step inputs: activations made from uploaded values copied into step tensors.
  auto step_input = [&](model::Backend& backend, const Tensor& source, DType dtype) {
    Tensor t = backend.allocate(dtype, {source.shape[0], source.shape[1]});
    backend.copy(source, t);
    return t;
  };

  const DType act = b.cuda.activation_dtype();
  auto [x_cpu0, x_cuda0] = b.input2("x", tokens, hidden, 1.0f);
  const Tensor x_cpu = step_input(b.cpu, x_cpu0, DType::kF32);
  const Tensor x_cuda = step_input(b.cuda, x_cuda0, act);

  {  // linear, bf16 and fp32 outputs
    Tensor want = b.cpu.allocate(DType::kF32, {tokens, 48});
    b.cpu.linear(x_cpu, w_cpu, want);
    Tensor got = b.cuda.allocate(act, {tokens, 48});
    b.cuda.linear(x_cuda, w_cuda, got);
    b.expect_close("linear (bf16 out)", got, want);
    Tensor got_f32 = b.cuda.allocate(DType::kF32, {tokens, 48});
    b.cuda.linear(x_cuda, w_cuda, got_f32);
    b.expect_close("linear (fp32 out)", got_f32, want);
  }
  {  // rms_norm and add_rms_norm on a 576-wide row
    auto [y_cpu0, y_cuda0] = b.input2("y", tokens, latent, 1.0f);
    const Tensor norm_w_cpu = norm_cpu.reshape({latent});
    const Tensor norm_w_cuda = norm_cuda.reshape({latent});
    Tensor want = b.cpu.allocate(DType::kF32, {tokens, latent});
    b.cpu.rms_norm(y_cpu0, norm_w_cpu, 1e-6f, want);
    Tensor got = b.cuda.allocate(act, {tokens, latent});
    b.cuda.rms_norm(y_cuda0, norm_w_cuda, 1e-6f, got);
    b.expect_close("rms_norm", got, want);
    Tensor residual_cpu = step_input(b.cpu, y_cpu0, DType::kF32);
    Tensor residual_cuda = step_input(b.cuda, y_cuda0, DType::kF32);
    Tensor want2 = b.cpu.allocate(DType::kF32, {tokens, latent});
    b.cpu.add_rms_norm(residual_cpu, want, norm_w_cpu, 1e-6f, want2);
    Tensor got2 = b.cuda.allocate(act, {tokens, latent});
    b.cuda.add_rms_norm(residual_cuda, got, norm_w_cuda, 1e-6f, got2);
    b.expect_close("add_rms_norm residual", residual_cuda, residual_cpu);
    b.expect_close("add_rms_norm out", got2, want2);
  }
  {  // silu_mul
    Tensor want = b.cpu.allocate(DType::kF32, {tokens, hidden});
    b.cpu.silu_mul(x_cpu, x_cpu, want);
    Tensor got = b.cuda.allocate(act, {tokens, hidden});
    b.cuda.silu_mul(x_cuda, x_cuda, got);
    b.expect_close("silu_mul", got, want);
  }
  {  // head_matmul: q_nope · W_UK and o_lat · W_UVᵀ over strided views of kv_b_proj
    const Tensor kv_cpu = kv_b_cpu.reshape({heads, 256, rank});
    const Tensor kv_cuda = kv_b_cuda.reshape({heads, 256, rank});
    auto [q_cpu0, q_cuda0] = b.input2("q", decode, heads * 192, 1.0f);
    const Tensor q_cpu = q_cpu0.reshape({decode, heads, 192}).slice(2, 0, 128);
    const Tensor q_cuda = q_cuda0.reshape({decode, heads, 192}).slice(2, 0, 128);
    Tensor want = b.cpu.allocate(DType::kF32, {decode, heads, latent});
    Tensor want_lat = want.slice(2, 0, rank);
    b.cpu.head_matmul(q_cpu, kv_cpu.slice(1, 0, 128), false, want_lat);
    Tensor got = b.cuda.allocate(act, {decode, heads, latent});
    Tensor got_lat = got.slice(2, 0, rank);
    b.cuda.head_matmul(q_cuda, kv_cuda.slice(1, 0, 128), false, got_lat);
    b.expect_close("head_matmul W_UK", got_lat, want_lat);
    Tensor want_v = b.cpu.allocate(DType::kF32, {decode, heads, 128});
    b.cpu.head_matmul(want_lat, kv_cpu.slice(1, 128, 128), true, want_v);
    Tensor got_v = b.cuda.allocate(act, {decode, heads, 128});
    b.cuda.head_matmul(got_lat, kv_cuda.slice(1, 128, 128), true, got_v);
    b.expect_close("head_matmul W_UV", got_v, want_v);
  }
  {  // latent_cache_write (norm + rope + cache write at the plan's slots), then the gather
    auto [kv_a_cpu0, kv_a_cuda0] = b.input2("kv_a", tokens, latent, 1.0f);
    const Tensor norm_w_cpu = norm_cpu.reshape({latent}).slice(0, 0, rank);
    const Tensor norm_w_cuda = norm_cuda.reshape({latent}).slice(0, 0, rank);
    Tensor want = b.cpu.allocate(DType::kF32, {tokens, latent});
    b.cpu.latent_cache_write(kv_a_cpu0, norm_w_cpu, 1e-6f, rope_table, want, cache_cpu);
    Tensor got = b.cuda.allocate(act, {tokens, latent});
    b.cuda.latent_cache_write(kv_a_cuda0, norm_w_cuda, 1e-6f, rope_table, got, cache_cuda);
    b.expect_close("latent_cache_write", got, want);
    b.expect_close("cache after the write", cache_cuda, cache_cpu);
    const std::vector<int64_t>& slots = plan.context_chunks.at(0).slots;
    const int64_t n = static_cast<int64_t>(slots.size());
    Tensor want_g = b.cpu.allocate(DType::kF32, {n, latent});
    b.cpu.gather_latent_cache(cache_cpu, slots, want_g);
    Tensor got_g = b.cuda.allocate(act, {n, latent});
    b.cuda.gather_latent_cache(cache_cuda, slots, got_g);
    b.expect_close("gather_latent_cache", got_g, want_g);
  }
  {  // rope in place on q_pe-like views
    auto [q_cpu0, q_cuda0] = b.input2("qpe", tokens, heads * 192, 1.0f);
    Tensor q_cpu = step_input(b.cpu, q_cpu0, DType::kF32);
    Tensor q_cuda = step_input(b.cuda, q_cuda0, act);
    Tensor pe_cpu = q_cpu.reshape({tokens, heads, 192}).slice(2, 128, rope);
    Tensor pe_cuda = q_cuda.reshape({tokens, heads, 192}).slice(2, 128, rope);
    b.cpu.rope(pe_cpu, rope_table);
    b.cuda.rope(pe_cuda, rope_table);
    b.expect_close("rope", q_cuda, q_cpu);
  }
  {  // rope as the MLA layer runs it: q_pe a view of the fused projection's wider rows; the
     // decode rows out of place into the absorbed query's pe slice, the prefill rows in place
     // from row `decode` of the step (their positions)
    const int64_t row = heads * 192 + latent;
    auto [q_cpu0, q_cuda0] = b.input2("fused", tokens, row, 1.0f);
    Tensor q_cpu = step_input(b.cpu, q_cpu0, DType::kF32);
    Tensor q_cuda = step_input(b.cuda, q_cuda0, act);
    auto q_pe = [&](const Tensor& q) {
      return q.slice(1, 0, heads * 192).unflatten(1, heads, 192).slice(2, 128, rope);
    };
    Tensor pe_cpu = q_pe(q_cpu), pe_cuda = q_pe(q_cuda);
    Tensor prefill_cpu = pe_cpu.slice(0, decode, prefill);
    Tensor prefill_cuda = pe_cuda.slice(0, decode, prefill);
    b.cpu.rope(prefill_cpu, rope_table, decode, prefill_cpu);
    b.cuda.rope(prefill_cuda, rope_table, decode, prefill_cuda);
    b.expect_close("rope prefill rows", q_cuda, q_cpu);
    Tensor absorbed_cpu = b.cpu.allocate(DType::kF32, {decode, heads, latent});
    Tensor absorbed_cuda = b.cuda.allocate(act, {decode, heads, latent});
    b.cpu.fill(absorbed_cpu, 0.5f);
    b.cuda.fill(absorbed_cuda, 0.5f);
    Tensor absorbed_pe_cpu = absorbed_cpu.slice(2, rank, rope);
    Tensor absorbed_pe_cuda = absorbed_cuda.slice(2, rank, rope);
    b.cpu.rope(pe_cpu.slice(0, 0, decode), rope_table, 0, absorbed_pe_cpu);
    b.cuda.rope(pe_cuda.slice(0, 0, decode), rope_table, 0, absorbed_pe_cuda);
    b.expect_close("rope into q_absorbed", absorbed_cuda, absorbed_cpu);
    b.expect_close("rope source unchanged", q_cuda, q_cpu);
  }
  {  // the decode op over the cache, for the decode rows
    auto [q_cpu0, q_cuda0] = b.input3("qabs", decode, heads, latent, 1.0f);
    Tensor want = b.cpu.allocate(DType::kF32, {decode, heads, rank});
    Tensor want_lse = b.cpu.allocate(DType::kF32, {decode, heads});
    b.cpu.mla_decode(q_cpu0, cache_cpu, static_cast<int>(rank), 0.1f, want, want_lse);
    Tensor got = b.cuda.allocate(act, {decode, heads, rank});
    Tensor got_lse = b.cuda.allocate(DType::kF32, {decode, heads});
    b.cuda.mla_decode(q_cuda0, cache_cuda, static_cast<int>(rank), 0.1f, got, got_lse);
    b.expect_close("mla_decode out", got, want);
    b.expect_close("mla_decode lse", got_lse, want_lse);
  }
  {  // prefill attention over the prefill rows' spans, then one context chunk merged by LSE
    auto [q_cpu0, q_cuda0] = b.input3("pq", prefill, heads, 192, 1.0f);
    auto [k_cpu0, k_cuda0] = b.input3("pk", prefill, heads, 192, 1.0f);
    auto [v_cpu0, v_cuda0] = b.input3("pv", prefill, heads, 128, 1.0f);
    Tensor want = b.cpu.allocate(DType::kF32, {prefill, heads, 128});
    Tensor want_lse = b.cpu.allocate(DType::kF32, {prefill, heads});
    b.cpu.attention(q_cpu0, k_cpu0, v_cpu0, plan.prefill_spans, 0.07f, want, want_lse);
    Tensor got = b.cuda.allocate(act, {prefill, heads, 128});
    Tensor got_lse = b.cuda.allocate(DType::kF32, {prefill, heads});
    b.cuda.attention(q_cuda0, k_cuda0, v_cuda0, plan.prefill_spans, 0.07f, got, got_lse);
    b.expect_close("attention out", got, want);
    b.expect_close("attention lse", got_lse, want_lse);
    const model::ContextChunk& chunk = plan.context_chunks.at(0);
    const int64_t n = static_cast<int64_t>(chunk.slots.size());
    auto [ck_cpu, ck_cuda] = b.input3("ck", n, heads, 192, 1.0f);
    auto [cv_cpu, cv_cuda] = b.input3("cv", n, heads, 128, 1.0f);
    Tensor part_cpu = b.cpu.allocate(DType::kF32, {prefill, heads, 128});
    Tensor part_lse_cpu = b.cpu.allocate(DType::kF32, {prefill, heads});
    b.cpu.attention(q_cpu0, ck_cpu, cv_cpu, chunk.spans, 0.07f, part_cpu, part_lse_cpu);
    Tensor part_cuda = b.cuda.allocate(act, {prefill, heads, 128});
    Tensor part_lse_cuda = b.cuda.allocate(DType::kF32, {prefill, heads});
    b.cuda.attention(q_cuda0, ck_cuda, cv_cuda, chunk.spans, 0.07f, part_cuda, part_lse_cuda);
    b.expect_close("context attention", part_cuda, part_cpu);
    b.cpu.merge_attention(want, want_lse, part_cpu, part_lse_cpu);
    b.cuda.merge_attention(got, got_lse, part_cuda, part_lse_cuda);
    b.expect_close("merge_attention out", got, want);
    b.expect_close("merge_attention lse", got_lse, want_lse);
  }
  {  // The fused input projection's output and its column views, through every op that takes
     // them with the wider row stride (the same values on both sides, bf16-rounded): V2-Lite's
     // [tokens, heads·192 | 576] (q_nope into head_matmul, the prefill rows' q into attention,
     // kv_a into latent_cache_write) and V3's [tokens, 96 | 576] (q_compressed normed in place,
     // then into linear as a strided x)
    const int64_t q_out = heads * 192, row = q_out + latent;
    auto [f_cpu0, f_cuda0] = b.input2("fused out", tokens, row, 1.0f);
    Tensor f_cpu = step_input(b.cpu, f_cpu0, DType::kF32);
    Tensor f_cuda = step_input(b.cuda, f_cuda0, act);
    {  // the fused GEMM itself, into the wide buffer
      auto [wf_cpu, wf_cuda] = b.input2("w fused", row, hidden, 0.2f);
      Tensor want = b.cpu.allocate(DType::kF32, {tokens, row});
      b.cpu.linear(x_cpu, wf_cpu, want);
      Tensor got = b.cuda.allocate(act, {tokens, row});
      b.cuda.linear(x_cuda, wf_cuda, got);
      b.expect_close("linear (fused projection)", got, want);
    }
    const Tensor q_heads_cpu = f_cpu.slice(1, 0, q_out).unflatten(1, heads, 192);
    const Tensor q_heads_cuda = f_cuda.slice(1, 0, q_out).unflatten(1, heads, 192);
    {  // head_matmul: the decode rows' q_nope · W_UK
      const Tensor kv_cpu = kv_b_cpu.reshape({heads, 256, rank});
      const Tensor kv_cuda = kv_b_cuda.reshape({heads, 256, rank});
      Tensor want = b.cpu.allocate(DType::kF32, {decode, heads, rank});
      b.cpu.head_matmul(q_heads_cpu.slice(0, 0, decode).slice(2, 0, 128), kv_cpu.slice(1, 0, 128),
                        false, want);
      Tensor got = b.cuda.allocate(act, {decode, heads, rank});
      b.cuda.head_matmul(q_heads_cuda.slice(0, 0, decode).slice(2, 0, 128),
                         kv_cuda.slice(1, 0, 128), false, got);
      b.expect_close("head_matmul (strided q)", got, want);
    }
    {  // attention: the prefill rows' q
      auto [k_cpu0, k_cuda0] = b.input3("fk", prefill, heads, 192, 1.0f);
      auto [v_cpu0, v_cuda0] = b.input3("fv", prefill, heads, 128, 1.0f);
      Tensor want = b.cpu.allocate(DType::kF32, {prefill, heads, 128});
      Tensor want_lse = b.cpu.allocate(DType::kF32, {prefill, heads});
      b.cpu.attention(q_heads_cpu.slice(0, decode, prefill), k_cpu0, v_cpu0, plan.prefill_spans,
                      0.07f, want, want_lse);
      Tensor got = b.cuda.allocate(act, {prefill, heads, 128});
      Tensor got_lse = b.cuda.allocate(DType::kF32, {prefill, heads});
      b.cuda.attention(q_heads_cuda.slice(0, decode, prefill), k_cuda0, v_cuda0, plan.prefill_spans,
                       0.07f, got, got_lse);
      b.expect_close("attention (strided q)", got, want);
      b.expect_close("attention lse (strided q)", got_lse, want_lse);
    }
    {  // latent_cache_write: kv_a
      const Tensor norm_w_cpu = norm_cpu.reshape({latent}).slice(0, 0, rank);
      const Tensor norm_w_cuda = norm_cuda.reshape({latent}).slice(0, 0, rank);
      Tensor want = b.cpu.allocate(DType::kF32, {tokens, latent});
      b.cpu.latent_cache_write(f_cpu.slice(1, q_out, latent), norm_w_cpu, 1e-6f, rope_table, want,
                               cache_cpu);
      Tensor got = b.cuda.allocate(act, {tokens, latent});
      b.cuda.latent_cache_write(f_cuda.slice(1, q_out, latent), norm_w_cuda, 1e-6f, rope_table, got,
                                cache_cuda);
      b.expect_close("latent_cache_write (strided kv_a)", got, want);
      b.expect_close("cache after it", cache_cuda, cache_cpu);
    }
    {  // V3: q_compressed [tokens, 96] of [tokens, 96 + 576] rows, normed in place, then q_b_proj
      const int64_t q_lora = 96;
      auto [g_cpu0, g_cuda0] = b.input2("fused v3", tokens, q_lora + latent, 1.0f);
      Tensor g_cpu = step_input(b.cpu, g_cpu0, DType::kF32);
      Tensor g_cuda = step_input(b.cuda, g_cuda0, act);
      Tensor qc_cpu = g_cpu.slice(1, 0, q_lora);
      Tensor qc_cuda = g_cuda.slice(1, 0, q_lora);
      const Tensor qn_cpu = norm_cpu.reshape({latent}).slice(0, 0, q_lora);
      const Tensor qn_cuda = norm_cuda.reshape({latent}).slice(0, 0, q_lora);
      b.cpu.rms_norm(qc_cpu, qn_cpu, 1e-6f, qc_cpu);
      b.cuda.rms_norm(qc_cuda, qn_cuda, 1e-6f, qc_cuda);
      b.expect_close("rms_norm in place (strided)", g_cuda, g_cpu);  // kv_a part untouched too
      auto [qb_cpu, qb_cuda] = b.input2("q_b_proj", heads * 192, q_lora, 0.2f);
      Tensor want = b.cpu.allocate(DType::kF32, {tokens, heads * 192});
      b.cpu.linear(qc_cpu, qb_cpu, want);
      Tensor got = b.cuda.allocate(act, {tokens, heads * 192});
      b.cuda.linear(qc_cuda, qb_cuda, got);
      b.expect_close("linear (strided x)", got, want);
    }
  }
  {  // MoE: V3-style routing (sigmoid, noaux_tc with a bias, 4 groups of 4, renormalised), experts
    ref::MoeRoutingParams routing;
    routing.num_experts = 16;
    routing.top_k = 4;
    routing.n_group = 4;
    routing.topk_group = 2;
    routing.scoring = ref::MoeScoring::kSigmoid;
    routing.method = ref::MoeTopk::kNoauxTc;
    routing.normalize = true;
    routing.routed_scaling_factor = 2.5f;
    routing.scale_when_normalized = true;
    Tensor logits_cpu = b.cpu.allocate(DType::kF32, {tokens, 16});
    b.cpu.linear(x_cpu, router_cpu, logits_cpu);
    // Both route the CPU's logits, so a tie-break difference cannot come from the GEMM.
    const std::vector<float> logits = host(b.cpu, logits_cpu);
    const Tensor logits_cuda0 = b.cuda.allocate(DType::kF32, {tokens, 16});
    // On the backend's stream: it does not wait for the legacy stream's copies.
    MLA_CUDA_CHECK(cudaMemcpyAsync(logits_cuda0.data, logits.data(), logits.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, b.cuda.stream()));
    MLA_CUDA_CHECK(cudaStreamSynchronize(b.cuda.stream()));
    Tensor ids_cpu = b.cpu.allocate(DType::kI32, {tokens, 4});
    Tensor wts_cpu = b.cpu.allocate(DType::kF32, {tokens, 4});
    b.cpu.moe_route(logits_cpu, bias_cpu, routing, ids_cpu, wts_cpu);
    Tensor ids_cuda = b.cuda.allocate(DType::kI32, {tokens, 4});
    Tensor wts_cuda = b.cuda.allocate(DType::kF32, {tokens, 4});
    b.cuda.moe_route(logits_cuda0, bias_cuda, routing, ids_cuda, wts_cuda);
    std::vector<int32_t> want_ids(tokens * 4), got_ids(tokens * 4);
    std::memcpy(want_ids.data(), ids_cpu.data, want_ids.size() * sizeof(int32_t));
    MLA_CUDA_CHECK(cudaStreamSynchronize(b.cuda.stream()));  // the backend's stream is its own
    MLA_CUDA_CHECK(cudaMemcpy(got_ids.data(), ids_cuda.data, got_ids.size() * sizeof(int32_t),
                              cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_ids, want_ids);
    b.expect_close("moe_route weights", wts_cuda, wts_cpu);
    Tensor want = b.cpu.allocate(DType::kF32, {tokens, hidden});
    b.cpu.moe_experts(x_cpu, ids_cpu, wts_cpu, experts_cpu, /*accumulate=*/false, want);
    Tensor got = b.cuda.allocate(act, {tokens, hidden});
    b.cuda.moe_experts(x_cuda, ids_cuda, wts_cuda, experts_cuda, /*accumulate=*/false, got);
    b.expect_close("moe_experts", got, want);
    // Accumulating onto those outputs (as onto the shared experts'): twice the sum on both sides.
    b.cpu.moe_experts(x_cpu, ids_cpu, wts_cpu, experts_cpu, /*accumulate=*/true, want);
    b.cuda.moe_experts(x_cuda, ids_cuda, wts_cuda, experts_cuda, /*accumulate=*/true, got);
    b.expect_close("moe_experts accumulated", got, want);

    // Folded shared experts (ModelOptions::fold_shared_experts): 2 more experts of width 32 cut
    // from a [2·32, hidden] gate/up (row views) and a [hidden, 2·32] down (column blocks copied by
    // repack_weight), appended by the router as ids 16, 17 with weight 1 after the routed pairs.
    constexpr int kShared = 2;
    auto [sg_cpu, sg_cuda] = b.input2("shared gate", kShared * 32, hidden, 0.2f);
    auto [su_cpu, su_cuda] = b.input2("shared up", kShared * 32, hidden, 0.2f);
    auto [sd_cpu, sd_cuda] = b.input2("shared down", hidden, kShared * 32, 0.2f);
    model::ExpertWeights folded_cpu = experts_cpu, folded_cuda = experts_cuda;
    for (int j = 0; j < kShared; ++j) {
      folded_cpu.gate_proj.push_back(sg_cpu.slice(0, j * 32, 32));
      folded_cpu.up_proj.push_back(su_cpu.slice(0, j * 32, 32));
      folded_cpu.down_proj.push_back(b.cpu.repack_weight(sd_cpu.slice(1, j * 32, 32)));
      folded_cuda.gate_proj.push_back(sg_cuda.slice(0, j * 32, 32));
      folded_cuda.up_proj.push_back(su_cuda.slice(0, j * 32, 32));
      folded_cuda.down_proj.push_back(b.cuda.repack_weight(sd_cuda.slice(1, j * 32, 32)));
      EXPECT_TRUE(folded_cuda.down_proj.back().is_contiguous());
      // A copy of bf16 values: exact.
      EXPECT_EQ(host(b.cuda, folded_cuda.down_proj.back()),
                host(b.cpu, folded_cpu.down_proj.back()))
          << "repack_weight " << j;
    }
    ref::MoeRoutingParams folded_routing = routing;
    folded_routing.appended_experts = kShared;
    const int64_t pairs = 4 + kShared;
    Tensor fids_cpu = b.cpu.allocate(DType::kI32, {tokens, pairs});
    Tensor fwts_cpu = b.cpu.allocate(DType::kF32, {tokens, pairs});
    b.cpu.moe_route(logits_cpu, bias_cpu, folded_routing, fids_cpu, fwts_cpu);
    Tensor fids_cuda = b.cuda.allocate(DType::kI32, {tokens, pairs});
    Tensor fwts_cuda = b.cuda.allocate(DType::kF32, {tokens, pairs});
    b.cuda.moe_route(logits_cuda0, bias_cuda, folded_routing, fids_cuda, fwts_cuda);
    std::vector<int32_t> want_fids(tokens * pairs), got_fids(tokens * pairs);
    std::memcpy(want_fids.data(), fids_cpu.data, want_fids.size() * sizeof(int32_t));
    MLA_CUDA_CHECK(cudaStreamSynchronize(b.cuda.stream()));
    MLA_CUDA_CHECK(cudaMemcpy(got_fids.data(), fids_cuda.data, got_fids.size() * sizeof(int32_t),
                              cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_fids, want_fids);
    const std::vector<float> routed_wts = host(b.cuda, wts_cuda);
    const std::vector<float> folded_wts = host(b.cuda, fwts_cuda);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int k = 0; k < 4; ++k) {  // the routed pairs as without the appended ones, bit for bit
        EXPECT_EQ(got_fids[t * pairs + k], got_ids[t * 4 + k]) << t << " " << k;
        EXPECT_EQ(std::memcmp(&folded_wts[t * pairs + k], &routed_wts[t * 4 + k], sizeof(float)), 0)
            << t << " " << k;
      }
      for (int j = 0; j < kShared; ++j) {
        EXPECT_EQ(got_fids[t * pairs + 4 + j], 16 + j) << t;
        EXPECT_EQ(folded_wts[t * pairs + 4 + j], 1.0f) << t;
      }
    }
    Tensor folded_want = b.cpu.allocate(DType::kF32, {tokens, hidden});
    b.cpu.moe_experts(x_cpu, fids_cpu, fwts_cpu, folded_cpu, /*accumulate=*/false, folded_want);
    Tensor folded_got = b.cuda.allocate(act, {tokens, hidden});
    b.cuda.moe_experts(x_cuda, fids_cuda, fwts_cuda, folded_cuda, /*accumulate=*/false, folded_got);
    b.expect_close("moe_experts folded", folded_got, folded_want);
  }
  b.cuda.end_step();
  b.cpu.end_step();
}

// The op profiler (CudaBackend::set_op_profiling) on whole decode steps of the tiny V2-Lite fixture
// (2 layers, the second MoE): four decode rows of 100 cached tokens each.
struct ProfiledModel {
  model::CudaBackend backend;
  std::unique_ptr<model::Model> deepseek;
  model::SyntheticBatch step;
  model::LatentCache cache;

  explicit ProfiledModel(bool step_graphs) {
    model::ModelOptions options;
    options.step_graphs = step_graphs;
    deepseek = model::Model::load(testing::fixture_dir("tiny-deepseek-v2-lite"), backend, options);
    step = model::make_synthetic_batch({4, 100, 0, 0, 0}, deepseek->config().vocab_size, 64, 1);
    cache = deepseek->allocate_cache(step.num_pages, 64);
    for (Tensor& layer : cache.layers) backend.fill(layer, 0.25f);
  }
  void forward() { deepseek->forward(step.batch, cache); }
};

const model::OpProfileEntry* find_entry(const std::vector<model::OpProfileEntry>& profile,
                                        const std::string& name) {
  for (const model::OpProfileEntry& entry : profile)
    if (entry.name == name) return &entry;
  return nullptr;
}

TEST(CudaBackendOps, OpProfilerTimesEveryOpOfAnEagerStep) {
  MLA_REQUIRE_SM90_GPU();
  ProfiledModel m(/*step_graphs=*/false);
  m.forward();  // first-use set-up, not profiled
  EXPECT_TRUE(m.backend.op_profile().empty());
  m.backend.set_op_profiling(true);
  m.forward();
  const std::vector<model::OpProfileEntry> profile = m.backend.op_profile();
  for (const model::OpProfileEntry& e : profile)
    std::printf("[ profile  ] %-24s %s calls %3lld  %8.1f us\n", e.name.c_str(),
                e.phase ? "phase" : "op   ", static_cast<long long>(e.calls), e.total_us);
  for (const char* name :
       {"begin_step", "plan_decode", "embedding", "linear", "head_matmul", "latent_cache_write",
        "mla_decode", "mla_decode/split_kv", "moe_route", "moe_experts", "moe_experts/plan",
        "moe_experts/gate_up", "moe_experts/down", "moe_experts/unpermute"}) {
    const model::OpProfileEntry* entry = find_entry(profile, name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_GT(entry->calls, 0) << name;
    EXPECT_GT(entry->total_us, 0.0) << name;
    EXPECT_EQ(entry->phase, std::string(name).find('/') != std::string::npos) << name;
  }
  int moe_layers = 0;
  for (int i = 0; i < m.deepseek->config().num_hidden_layers; ++i)
    moe_layers += m.deepseek->layer(i).is_moe;
  EXPECT_EQ(find_entry(profile, "mla_decode")->calls, m.deepseek->config().num_hidden_layers);
  EXPECT_EQ(find_entry(profile, "moe_experts")->calls, moe_layers);
  EXPECT_EQ(find_entry(profile, "moe_experts/gate_up")->calls, moe_layers);
  // Phases lie inside their op's event pair, one after the other: their sum is at most the op's
  // time, up to the events' resolution (about 0.5 us per elapsed-time reading).
  double moe_phases_us = 0;
  for (const char* phase : {"plan", "gate_up", "down", "unpermute"})
    moe_phases_us += find_entry(profile, std::string("moe_experts/") + phase)->total_us;
  EXPECT_LE(moe_phases_us, find_entry(profile, "moe_experts")->total_us + 4 * 0.5 * moe_layers);

  // Off: the totals stay, nothing more is recorded; a reset empties them.
  m.backend.set_op_profiling(false);
  m.forward();
  const std::vector<model::OpProfileEntry> after = m.backend.op_profile();
  ASSERT_EQ(after.size(), profile.size());
  for (const model::OpProfileEntry& entry : after) {
    const model::OpProfileEntry* before = find_entry(profile, entry.name);
    ASSERT_NE(before, nullptr) << entry.name;
    EXPECT_EQ(entry.calls, before->calls) << entry.name;
    EXPECT_EQ(entry.total_us, before->total_us) << entry.name;
  }
  m.backend.reset_op_profile();
  EXPECT_TRUE(m.backend.op_profile().empty());
}

// While a step graph is captured the profiler records nothing (events would become graph nodes);
// a replay is one entry, replay_step_graph, and begin_step (outside the recording) is timed too.
TEST(CudaBackendOps, OpProfilerIgnoresGraphCaptureAndTimesReplays) {
  MLA_REQUIRE_SM90_GPU();
  ProfiledModel m(/*step_graphs=*/true);
  m.backend.set_op_profiling(true);
  m.forward();  // eager (first step of the bucket): recorded
  EXPECT_NE(find_entry(m.backend.op_profile(), "linear"), nullptr);
  m.backend.reset_op_profile();
  m.forward();  // captured
  EXPECT_EQ(m.backend.stats().graphs_captured, 1);
  std::vector<model::OpProfileEntry> profile = m.backend.op_profile();
  EXPECT_EQ(find_entry(profile, "linear"), nullptr);
  EXPECT_EQ(find_entry(profile, "mla_decode/split_kv"), nullptr);
  ASSERT_NE(find_entry(profile, "begin_step"), nullptr);
  m.backend.reset_op_profile();
  m.forward();  // replayed
  EXPECT_EQ(m.backend.stats().graph_replays, 1);
  profile = m.backend.op_profile();
  EXPECT_EQ(find_entry(profile, "linear"), nullptr);
  const model::OpProfileEntry* replay = find_entry(profile, "replay_step_graph");
  ASSERT_NE(replay, nullptr);
  EXPECT_EQ(replay->calls, 1);
  EXPECT_GT(replay->total_us, 0.0);
}

// linear's tuned GEMM (cuda/tuned_gemm.h) on its own: decode-sized and prefill-sized problems,
// padded row strides, bf16 and fp32 outputs, against a double-precision host GEMM of the same
// bf16 inputs (tolerance: relative L2 <= 1e-2 for bf16 outputs, 1e-5 for fp32). Each decode-sized
// problem is timed once (tuning then leaves the output of the chosen algorithm), a repeat is not
// timed again, and one first seen while "capturing" runs untimed and is tuned when next allowed.
TEST(CudaBackendOps, TunedGemmMatchesAHostGemm) {
  MLA_REQUIRE_SM90_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::DeviceBuffer<char> workspace(size_t(32) << 20);
  const cuda::DeviceInfo device = cuda::current_device_info();
  cuda::TunedGemm gemm(stream, workspace.data(), workspace.bytes(), device.l2_cache_bytes);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  struct Case {
    int64_t m, n, k, x_pad, out_pad;
    bool out_f32;
  };
  int64_t expected_tuned = 0;
  for (const Case& c : {Case{1, 3072, 2048, 0, 0, false}, Case{128, 576, 2048, 8, 0, false},
                        Case{37, 1000, 520, 24, 40, true}, Case{256, 2816, 2048, 0, 0, false},
                        Case{300, 768, 1024, 0, 16, true}}) {
    const int64_t ldx = c.k + c.x_pad, ldo = c.n + c.out_pad;
    std::vector<bf16> x(size_t(c.m * ldx)), w(size_t(c.n * c.k));
    for (bf16& v : x) v = float_to_bf16(normal(rng));
    for (bf16& v : w) v = float_to_bf16(normal(rng) / std::sqrt(float(c.k)));
    cuda::DeviceBuffer<bf16> dx(x.size()), dw(w.size());
    dx.copy_from_host(x.data(), x.size());
    dw.copy_from_host(w.data(), w.size());
    const size_t out_elements = size_t(c.m * ldo);
    cuda::DeviceBuffer<float> out_f32(c.out_f32 ? out_elements : 0);
    cuda::DeviceBuffer<bf16> out_bf16(c.out_f32 ? 0 : out_elements);
    void* out = c.out_f32 ? static_cast<void*>(out_f32.data()) : out_bf16.data();
    cuda::GemmProblem p{c.m, c.n, c.k, ldx, ldo, c.out_f32};
    const bool decode_sized = c.m <= cuda::TunedGemm::kTunedMaxRows;
    if (c.m == 37) {  // first seen while capturing: runs, untimed
      gemm.run(p, dx.data(), dw.data(), out, /*may_tune=*/false);
      EXPECT_EQ(gemm.stats().problems_tuned, expected_tuned);
    }
    gemm.run(p, dx.data(), dw.data(), out, true);
    gemm.run(p, dx.data(), dw.data(), out, true);  // remembered: not timed again
    expected_tuned += decode_sized;
    EXPECT_EQ(gemm.stats().problems_tuned, expected_tuned) << c.m << "x" << c.n << "x" << c.k;
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

    std::vector<float> got(out_elements);
    if (c.out_f32) {
      got = out_f32.to_host(stream);
    } else {
      const std::vector<bf16> raw = out_bf16.to_host(stream);
      for (size_t i = 0; i < raw.size(); ++i) got[i] = bf16_to_float(raw[i]);
    }
    std::vector<float> want_rows, got_rows;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < c.k; ++k)
          sum +=
              double(bf16_to_float(x[size_t(i * ldx + k)])) * bf16_to_float(w[size_t(j * c.k + k)]);
        want_rows.push_back(static_cast<float>(sum));
        got_rows.push_back(got[size_t(i * ldo + j)]);
      }
    const double error = relative_l2(got_rows, want_rows);
    EXPECT_LE(error, c.out_f32 ? 1e-5 : kMaxRelativeL2) << c.m << "x" << c.n << "x" << c.k;
  }
  std::printf(
      "[ cuda     ] tuned GEMM: %lld problems timed, %lld chose other than the heuristic's "
      "first, %.1f ms\n",
      static_cast<long long>(gemm.stats().problems_tuned),
      static_cast<long long>(gemm.stats().tuned_not_first), gemm.stats().tuning_ms);
  cudaStreamDestroy(stream);
}

// The absorbed per-head products as strided batches, both W layouts: a [tokens, heads, k] view
// with a padded token stride, W as [heads, k, n] or [heads, n, k] (with a padded row stride), out
// [tokens, heads, n]; against a double-precision host product (relative L2 <= 1e-2, bf16 out).
TEST(CudaBackendOps, TunedGemmBatchedOverHeads) {
  MLA_REQUIRE_SM90_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::DeviceBuffer<char> workspace(size_t(32) << 20);
  cuda::TunedGemm gemm(stream, workspace.data(), workspace.bytes(),
                       cuda::current_device_info().l2_cache_bytes);
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t tokens = 40, heads = 16, k = 128, n = 512;
  const int64_t a_token_stride = heads * k + 64, w_pad = 8;
  for (const bool w_nk : {false, true}) {
    const int64_t w_ld = (w_nk ? k : n) + w_pad, w_rows = w_nk ? n : k;
    std::vector<bf16> a(size_t(tokens * a_token_stride)), w(size_t(heads * w_rows * w_ld));
    for (bf16& v : a) v = float_to_bf16(normal(rng));
    for (bf16& v : w) v = float_to_bf16(normal(rng) / std::sqrt(float(k)));
    cuda::DeviceBuffer<bf16> da(a.size()), dw(w.size()), dout(size_t(tokens * heads * n));
    da.copy_from_host(a);
    dw.copy_from_host(w);
    cuda::GemmProblem p;
    p.m = tokens;
    p.n = n;
    p.k = k;
    p.x_row_stride = a_token_stride;
    p.out_row_stride = heads * n;
    p.w_nk = w_nk;
    p.w_row_stride = w_ld;
    p.batch = heads;
    p.x_batch_stride = k;
    p.w_batch_stride = w_rows * w_ld;
    p.out_batch_stride = n;
    gemm.run(p, da.data(), dw.data(), dout.data(), true);
    const std::vector<bf16> raw = dout.to_host(stream);
    std::vector<float> got, want;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t i = 0; i < k; ++i) {
            const size_t wi = size_t(h * w_rows * w_ld + (w_nk ? j * w_ld + i : i * w_ld + j));
            sum += double(bf16_to_float(a[size_t(t * a_token_stride + h * k + i)])) *
                   bf16_to_float(w[wi]);
          }
          want.push_back(static_cast<float>(sum));
          got.push_back(bf16_to_float(raw[size_t((t * heads + h) * n + j)]));
        }
    EXPECT_LE(relative_l2(got, want), kMaxRelativeL2) << (w_nk ? "W [n, k]" : "W [k, n]");
  }
  EXPECT_EQ(gemm.stats().problems_tuned, 2);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace mla
