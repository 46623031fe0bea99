// The parts under the model, each on its own: config.json parsing (the released V2-Lite and V3
// configs), YaRN RoPE against Hugging Face's frequencies and layout, attention split and merged by
// LSE, the MoE router's three methods, the step plan's validation and chunking, the sampler.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/step_plan.h"
#include "ref/attention.h"
#include "ref/attention_merge.h"
#include "ref/moe_routing.h"
#include "ref/rope.h"
#include "weights/model_config.h"
#include "weights/presets.h"

namespace mla {
namespace {

// config.json of deepseek-ai/DeepSeek-V2-Lite (auto_map and the like left out).
const char* kV2LiteConfig = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "aux_loss_alpha": 0.001,
  "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10944, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
  "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts_per_tok": 6,
  "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": null,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 102400})";

// config.json of deepseek-ai/DeepSeek-V3.
const char* kV3Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "bos_token_id": 0,
  "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
  "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280})";

TEST(ModelConfig, ReleasedV2LiteConfig) {
  const auto c = weights::parse_model_config(nlohmann::json::parse(kV2LiteConfig), "v2-lite");
  EXPECT_EQ(c.architecture, weights::Architecture::kDeepseekV2);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.latent_dim(), 576);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_NEAR(c.softmax_scale(), 0.114721, 1e-6);  // 192^-0.5 · (0.1 · 0.707 · ln 40 + 1)²
  EXPECT_DOUBLE_EQ(c.rope_cos_sin_scale(), 1.0);
  EXPECT_EQ(c.topk_method, weights::TopkMethod::kGreedy);
  EXPECT_EQ(c.scoring_func, weights::ScoringFunc::kSoftmax);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{100001});
}

TEST(ModelConfig, ReleasedV3ConfigAndTheNewerRopeParameters) {
  const auto c = weights::parse_model_config(nlohmann::json::parse(kV3Config), "v3");
  EXPECT_EQ(c.architecture, weights::Architecture::kDeepseekV3);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_NEAR(c.softmax_scale(), 0.135234, 1e-6);
  EXPECT_EQ(c.topk_method, weights::TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, weights::ScoringFunc::kSigmoid);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.fp8_block_rows, 128);
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));

  // transformers >= 5 writes rope_parameters (with rope_theta inside) instead of rope_scaling.
  nlohmann::json json = nlohmann::json::parse(kV3Config);
  json["rope_parameters"] = json["rope_scaling"];
  json["rope_parameters"]["rope_type"] = "yarn";
  json["rope_parameters"].erase("type");
  json["rope_parameters"]["rope_theta"] = 50000;
  json.erase("rope_scaling");
  json.erase("rope_theta");
  const auto newer = weights::parse_model_config(json, "v3 newer");
  EXPECT_TRUE(newer.rope_scaling.yarn);
  EXPECT_DOUBLE_EQ(newer.rope_theta, 50000);
  EXPECT_NEAR(newer.softmax_scale(), 0.135234, 1e-6);

  // Without YaRN the scale is plain 192^-0.5.
  json.erase("rope_parameters");
  EXPECT_NEAR(weights::parse_model_config(json, "plain").softmax_scale(), 1 / std::sqrt(192.0),
              1e-12);
}

TEST(ModelConfig, InconsistentRoutingIsRejected) {
  nlohmann::json json = nlohmann::json::parse(kV3Config);
  json["n_group"] = 7;
  EXPECT_THROW(weights::parse_model_config(json, "x"), Error);
  json = nlohmann::json::parse(kV3Config);
  json["topk_method"] = "random";
  try {
    weights::parse_model_config(json, "cfg.json");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("topk_method 'random' is not supported"),
              std::string::npos);
  }
  json = nlohmann::json::parse(kV3Config);
  json["rope_scaling"]["type"] = "dynamic";
  EXPECT_THROW(weights::parse_model_config(json, "x"), Error);
}

ref::RopeParams v2_lite_rope() {
  ref::RopeParams rope;
  rope.rotary_dim = 64;
  rope.theta = 10000;
  rope.yarn = true;
  rope.factor = 40;
  rope.original_max_position_embeddings = 4096;
  return rope;
}

// Hugging Face transformers 5.24 (_compute_yarn_parameters) for V2-Lite, printed as hex floats:
// the ramp runs from dim 10 to 23.
TEST(Rope, YarnFrequenciesMatchTransformers) {
  const std::vector<float> inv_freq = ref::rope_inverse_frequencies(v2_lite_rope());
  ASSERT_EQ(inv_freq.size(), 32u);
  const std::vector<std::pair<int, float>> expected = {
      {0, 0x1.0p+0f},        {1, 0x1.7ff222p-1f},  {9, 0x1.33281ap-4f},   {10, 0x1.ccab84p-5f},
      {11, 0x1.3f8b74p-5f},  {16, 0x1.6872b2p-8f}, {22, 0x1.74eea6p-13f}, {23, 0x1.17a8e2p-15f},
      {24, 0x1.a36e2ep-16f}, {31, 0x1.bf749ep-19f}};
  for (const auto& [index, value] : expected)
    EXPECT_NEAR(inv_freq[index], value, 2e-7f * value) << "inv_freq[" << index << "]";
}

// The interleaved rotation gives the same q·k as Hugging Face's DeepseekV3 form (permute to
// [evens | odds], then rotate halves), and q·k depends only on the distance of the positions.
TEST(Rope, InterleavedPairsMatchThePermutedFormAndAreRelative) {
  const std::vector<float> inv_freq = ref::rope_inverse_frequencies(v2_lite_rope());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> q(64), k(64);
  for (float& v : q) v = normal(rng);
  for (float& v : k) v = normal(rng);
  auto rotated = [&](std::vector<float> x, int32_t position) {
    ref::apply_rope(x.data(), 1, 64, 1, 0, 64, &position, inv_freq.data(), 1.0f);
    return x;
  };
  auto permuted_rotated = [&](const std::vector<float>& x, int32_t position) {
    std::vector<float> out(64);
    for (int i = 0; i < 32; ++i) {
      const float angle = static_cast<float>(position) * inv_freq[i];
      const float even = x[2 * i], odd = x[2 * i + 1];
      out[i] = even * std::cos(angle) - odd * std::sin(angle);
      out[i + 32] = odd * std::cos(angle) + even * std::sin(angle);
    }
    return out;
  };
  auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
  };
  for (auto [m, n] : {std::pair{5, 2}, std::pair{300, 297}, std::pair{4000, 3997}}) {
    const double interleaved = dot(rotated(q, m), rotated(k, n));
    EXPECT_NEAR(interleaved, dot(permuted_rotated(q, m), permuted_rotated(k, n)), 1e-3);
    EXPECT_NEAR(interleaved, dot(rotated(q, 3), rotated(k, 0)), 2e-3) << m << " " << n;
  }
}

// The backend's RoPE as the MLA layer uses it: the prefill rows of q_pe in place from row
// num_decode of the step, the decode rows out of place into the pe slice of an absorbed-query
// buffer; q_pe a view of a wider row (the fused input projection's output). Bit for bit what one
// in-place call over all rows gives, with each row at its own step position; the source rows of
// the out-of-place call unchanged; nothing outside the views written.
TEST(Rope, BackendOutOfPlaceAndOffsetRowsMatchInPlace) {
  const int64_t tokens = 7, decode = 3, heads = 3, row = heads * 192 + 576;
  model::StepPlan plan;
  plan.num_tokens = static_cast<int>(tokens);
  plan.num_decode_tokens = static_cast<int>(decode);
  plan.positions = {17, 4000, 0, 163839, 5, 6, 7};
  model::RopeTable table;
  table.inv_freq = ref::rope_inverse_frequencies(v2_lite_rope());
  model::CpuBackend backend;
  backend.begin_step(plan);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  auto random_rows = [&](model::Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = normal(rng);
  };
  model::Tensor fused = backend.allocate(model::DType::kF32, {tokens, row});
  random_rows(fused);
  const std::vector<float> before(fused.as<float>(), fused.as<float>() + fused.numel());
  auto q_pe_of = [&](const model::Tensor& buffer) {  // [tokens, heads, 64] of the wider rows
    return buffer.slice(1, 0, heads * 192).unflatten(1, heads, 192).slice(2, 128, 64);
  };

  model::Tensor want_buffer = backend.allocate(model::DType::kF32, {tokens, row});
  std::memcpy(want_buffer.data, fused.data, fused.numel() * sizeof(float));
  model::Tensor want = q_pe_of(want_buffer);
  backend.rope(want, table);  // every row, in place

  model::Tensor q_pe = q_pe_of(fused);
  model::Tensor prefill = q_pe.slice(0, decode, tokens - decode);
  backend.rope(prefill, table, decode, prefill);
  model::Tensor absorbed = backend.allocate(model::DType::kF32, {decode, heads, 576});
  for (int64_t i = 0; i < absorbed.numel(); ++i) absorbed.as<float>()[i] = NAN;
  model::Tensor absorbed_pe = absorbed.slice(2, 512, 64);
  backend.rope(q_pe.slice(0, 0, decode), table, 0, absorbed_pe);

  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < 64; ++j) {
        const int64_t at = t * row + h * 192 + 128 + j;
        const float expected = want_buffer.as<float>()[at];
        if (t < decode) {
          EXPECT_EQ(fused.as<float>()[at], before[at]) << "source row " << t << " changed";
          EXPECT_EQ(absorbed.as<float>()[(t * heads + h) * 576 + 512 + j], expected)
              << "decode row " << t << " head " << h << " value " << j;
        } else {
          EXPECT_EQ(fused.as<float>()[at], expected)
              << "prefill row " << t << " head " << h << " value " << j;
        }
      }
  for (int64_t t = 0; t < tokens; ++t)  // outside q_pe: untouched
    for (int64_t c = 0; c < row; ++c)
      if (c >= heads * 192 || c % 192 < 128) {
        ASSERT_EQ(fused.as<float>()[t * row + c], before[t * row + c]) << t << " " << c;
      }
  for (int64_t i = 0; i < absorbed.numel(); ++i)
    if (i % 576 < 512) {
      ASSERT_TRUE(std::isnan(absorbed.as<float>()[i])) << i;
    }
  // Rows past the step's end: refused.
  EXPECT_ANY_THROW(backend.rope(prefill, table, decode + 1, prefill));
}

// Attention over keys split into two parts, merged by LSE, equals attention over all keys; the
// causal rule is bottom-right aligned.
TEST(Attention, SplitAndMergedByLseEqualsWhole) {
  const int q_count = 5, k_count = 23, heads = 3, d_qk = 192, d_v = 128;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> q(q_count * heads * d_qk), k(k_count * heads * d_qk), v(k_count * heads * d_v);
  for (auto* values : {&q, &k, &v})
    for (float& x : *values) x = normal(rng);
  auto run = [&](int k_begin, int count, bool causal, std::vector<float>& out,
                 std::vector<float>& lse) {
    out.assign(q_count * heads * d_v, 0.f);
    lse.assign(q_count * heads, 0.f);
    ref::AttentionArgs args;
    args.q_count = q_count;
    args.k_count = count;
    args.heads = heads;
    args.head_dim_qk = d_qk;
    args.head_dim_v = d_v;
    args.causal = causal;
    args.softmax_scale = 0.1147f;
    args.q = q.data();
    args.q_token_stride = heads * d_qk;
    args.q_head_stride = d_qk;
    args.k = k.data() + k_begin * heads * d_qk;
    args.k_token_stride = heads * d_qk;
    args.k_head_stride = d_qk;
    args.v = v.data() + k_begin * heads * d_v;
    args.v_token_stride = heads * d_v;
    args.v_head_stride = d_v;
    args.out = out.data();
    args.out_token_stride = heads * d_v;
    args.out_head_stride = d_v;
    args.lse = lse.data();
    args.lse_token_stride = heads;
    ref::attention(args);
  };
  std::vector<float> whole, whole_lse, first, first_lse, second, second_lse;
  run(0, k_count, true, whole, whole_lse);
  run(0, k_count - q_count, false, first, first_lse);  // the context: every query sees it all
  run(k_count - q_count, q_count, true, second, second_lse);
  for (int r = 0; r < q_count * heads; ++r)
    ref::merge_attention_partial(&first[r * d_v], &first_lse[r], &second[r * d_v], second_lse[r],
                                 d_v);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(first[i], whole[i], 1e-5) << i;
  for (size_t i = 0; i < whole_lse.size(); ++i) ASSERT_NEAR(first_lse[i], whole_lse[i], 1e-5);
  // Query 0 sees exactly the keys up to k_count - q_count.
  std::vector<float> out, lse;
  run(0, k_count - q_count + 1, false, out, lse);
  for (int h = 0; h < heads; ++h) EXPECT_NEAR(lse[h], whole_lse[h], 1e-5);
}

TEST(MoeRouting, SoftmaxGreedyV2) {
  ref::MoeRoutingParams params;
  params.num_experts = 4;
  params.top_k = 2;
  params.routed_scaling_factor = 16.0f;
  params.scale_when_normalized = false;
  const float logits[4] = {0.f, 2.f, 1.f, -1.f};
  int32_t ids[2];
  float weights[2];
  ref::route_experts(logits, nullptr, params, ids, weights);
  const double total = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(weights[0], 16 * std::exp(2.0) / total, 1e-5);  // not renormalised, scaled
  params.normalize = true;                                    // V2: renormalised, not scaled
  ref::route_experts(logits, nullptr, params, ids, weights);
  EXPECT_NEAR(weights[0] + weights[1], 1.0, 1e-6);
}

TEST(MoeRouting, GroupLimitedGreedyKeepsTheBestGroups) {
  ref::MoeRoutingParams params;
  params.num_experts = 6;
  params.top_k = 2;
  params.n_group = 3;
  params.topk_group = 1;
  params.method = ref::MoeTopk::kGroupLimitedGreedy;
  // Groups {0,1} {2,3} {4,5}: the best expert (4) decides the group; 1 is second best overall but
  // in a losing group.
  const float logits[6] = {0.f, 2.9f, 0.f, 0.f, 3.f, 0.5f};
  int32_t ids[2];
  float weights[2];
  ref::route_experts(logits, nullptr, params, ids, weights);
  EXPECT_EQ(ids[0], 4);
  EXPECT_EQ(ids[1], 5);
}

TEST(MoeRouting, NoauxTcBiasPicksButNeverWeighs) {
  ref::MoeRoutingParams params;
  params.num_experts = 8;
  params.top_k = 2;
  params.n_group = 4;
  params.topk_group = 2;
  params.scoring = ref::MoeScoring::kSigmoid;
  params.method = ref::MoeTopk::kNoauxTc;
  params.normalize = true;
  params.routed_scaling_factor = 2.5f;
  params.scale_when_normalized = true;
  const float logits[8] = {1.f, 1.f, 0.f, 0.f, 2.f, -3.f, 0.5f, 0.5f};
  const float bias[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.9f, 0.f};
  int32_t ids[2];
  float weights[2];
  ref::route_experts(logits, bias, params, ids, weights);
  // Group scores (top-2 sums with bias): g0 1.46, g1 1.0, g2 0.93, g3 2.14 → groups 3 and 0;
  // expert 4, the best by unbiased score after 6, is out with its group.
  // Candidates by biased score: 6 (1.52), then 0 and 1 (0.73 each, the lower id wins).
  EXPECT_EQ(ids[0], 6);
  EXPECT_EQ(ids[1], 0);
  const double s6 = 1 / (1 + std::exp(-0.5)), s0 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(weights[0], 2.5 * s6 / (s6 + s0), 1e-5);  // unbiased score, renormalised, scaled
  EXPECT_NEAR(weights[1], 2.5 * s0 / (s6 + s0), 1e-5);
}

// The folded shared experts: appended_experts pairs after the routed top_k, ids num_experts..,
// weight exactly 1 (neither renormalised nor scaled), and the routed pairs bit-identical to a
// route without them; nothing written past top_k + appended_experts.
TEST(MoeRouting, AppendedExpertsFollowTheRoutedPairs) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 2.f);
  for (ref::MoeTopk method :
       {ref::MoeTopk::kGreedy, ref::MoeTopk::kGroupLimitedGreedy, ref::MoeTopk::kNoauxTc}) {
    for (int appended : {1, 2, 3}) {
      ref::MoeRoutingParams params;
      params.num_experts = 24;
      params.top_k = 5;
      params.n_group = 4;
      params.topk_group = 2;
      params.method = method;
      params.scoring =
          method == ref::MoeTopk::kNoauxTc ? ref::MoeScoring::kSigmoid : ref::MoeScoring::kSoftmax;
      params.normalize = true;
      params.routed_scaling_factor = 2.5f;
      params.scale_when_normalized = true;
      std::vector<float> logits(params.num_experts), bias(params.num_experts);
      for (float& v : logits) v = normal(rng);
      for (float& v : bias) v = 0.05f * normal(rng);
      std::vector<int32_t> plain_ids(params.top_k);
      std::vector<float> plain_weights(params.top_k);
      ref::route_experts(logits.data(), bias.data(), params, plain_ids.data(),
                         plain_weights.data());
      params.appended_experts = appended;
      const int pairs = params.top_k + appended;
      std::vector<int32_t> ids(pairs + 1, -7);  // one sentinel past the end
      std::vector<float> weights(pairs + 1, -7.f);
      ref::route_experts(logits.data(), bias.data(), params, ids.data(), weights.data());
      for (int i = 0; i < params.top_k; ++i) {
        EXPECT_EQ(ids[i], plain_ids[i]) << i;
        EXPECT_EQ(std::memcmp(&weights[i], &plain_weights[i], sizeof(float)), 0) << i;
      }
      for (int j = 0; j < appended; ++j) {
        EXPECT_EQ(ids[params.top_k + j], params.num_experts + j);
        EXPECT_EQ(weights[params.top_k + j], 1.0f);
      }
      EXPECT_EQ(ids[pairs], -7);
      EXPECT_EQ(weights[pairs], -7.f);
    }
  }
}

model::ForwardBatch two_decodes_two_prefills() {
  // Sequences: A decodes at position 70 (pages 3, 8); B decodes at 0 (page 5);
  // C prefills 3 tokens after 130 cached (pages 0, 1, 2); D prefills 2 tokens from scratch (4).
  model::ForwardBatch batch;
  auto add = [&](int num_cached, int num_tokens, std::vector<int32_t> table) {
    model::SequenceSlice seq;
    seq.first_token = static_cast<int>(batch.token_ids.size());
    seq.num_tokens = num_tokens;
    seq.num_cached = num_cached;
    seq.block_table = table;
    for (int j = 0; j < num_tokens; ++j) {
      const int position = num_cached + j;
      batch.token_ids.push_back(position % 7);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(int64_t(table[position / 64]) * 64 + position % 64);
    }
    batch.sequences.push_back(seq);
  };
  add(70, 1, {3, 8});
  add(0, 1, {5});
  add(130, 3, {0, 1, 2});
  add(0, 2, {4});
  batch.logit_rows = {0, 1, 4, 6};
  return batch;
}

// routing_margin: ties at a deciding boundary give 0, and on random routers no logit change
// small enough to move the choice values by under margin / 4 changes the chosen set, while one
// aimed at the deciding boundary and a little over the margin does (so the margin is not too low
// either).
TEST(MoeRouting, MarginIsTheGapAtTheDecidingBoundary) {
  ref::MoeRoutingParams v3;
  v3.num_experts = 16;
  v3.top_k = 4;
  v3.n_group = 4;
  v3.topk_group = 2;
  v3.scoring = ref::MoeScoring::kSigmoid;
  v3.method = ref::MoeTopk::kNoauxTc;
  ref::MoeRoutingParams v2;
  v2.num_experts = 8;
  v2.top_k = 3;
  // A tie at the top_k boundary (experts 2 and 3, the 3rd and 4th best): margin 0.
  const float tied[8] = {3.f, 2.5f, 1.f, 1.f, -1.f, -2.f, 0.f, -0.5f};
  EXPECT_EQ(ref::routing_margin(tied, nullptr, v2), 0.0f);
  // A tie inside the chosen set decides nothing.
  const float tied_inside[8] = {3.f, 3.f, 1.f, 0.f, -1.f, -2.f, 0.f, -0.5f};
  EXPECT_GT(ref::routing_margin(tied_inside, nullptr, v2), 0.03f);  // (e - 1) / 46
  // Every expert chosen: nothing competes.
  ref::MoeRoutingParams all = v2;
  all.top_k = 8;
  EXPECT_TRUE(std::isinf(ref::routing_margin(tied, nullptr, all)));

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  auto chosen_set = [](const float* logits, const float* bias, const ref::MoeRoutingParams& p) {
    std::vector<int32_t> ids(p.top_k);
    std::vector<float> weights(p.top_k);
    ref::route_experts(logits, bias, p, ids.data(), weights.data());
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  int checked_gaps = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const ref::MoeRoutingParams& p = trial % 2 ? v3 : v2;
    std::vector<float> logits(p.num_experts), bias(p.num_experts);
    for (float& v : logits) v = normal(rng);
    for (float& v : bias) v = 0.2f * normal(rng);
    const float* b = trial % 2 ? bias.data() : nullptr;
    const float margin = ref::routing_margin(logits.data(), b, p);
    ASSERT_GE(margin, 0.0f);
    const std::vector<int32_t> before = chosen_set(logits.data(), b, p);
    // Largest logit step moving any choice value by < margin / 4: sigmoid' <= 1/4; a softmax
    // score moves by at most (e^(2 step) - 1) of itself.
    const float step = trial % 2 ? 0.99f * margin : 0.49f * std::log1p(0.99f * margin / 4.0f);
    for (int k = 0; k < 20; ++k) {
      std::vector<float> moved = logits;
      for (float& v : moved) v += step * std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      ASSERT_EQ(chosen_set(moved.data(), b, p), before)
          << "trial " << trial << " margin " << margin;
    }
    // Greedy softmax: the margin is the gap between the top_k-th and the next softmax score.
    if (trial % 2 == 0) {
      std::vector<double> scores(p.num_experts);
      double total = 0.0;
      for (int e = 0; e < p.num_experts; ++e) total += scores[e] = std::exp(double(logits[e]));
      for (double& s : scores) s /= total;
      std::sort(scores.begin(), scores.end(), std::greater<double>());
      EXPECT_NEAR(margin, scores[p.top_k - 1] - scores[p.top_k], 1e-6);
      ++checked_gaps;
    }
  }
  EXPECT_EQ(checked_gaps, 200);
}

TEST(StepPlan, DecodeRowsPrefillSpansAndContextChunks) {
  const model::StepPlan plan =
      model::make_step_plan(two_decodes_two_prefills(), {9, 64}, 100, /*context_chunk=*/50);
  EXPECT_EQ(plan.num_tokens, 7);
  EXPECT_EQ(plan.num_decode_tokens, 2);
  EXPECT_EQ(plan.decode_seqlens, (std::vector<int32_t>{71, 1}));
  EXPECT_EQ(plan.decode_max_pages, 2);
  EXPECT_EQ(plan.decode_block_table, (std::vector<int32_t>{3, 8, 5, 0}));
  ASSERT_EQ(plan.prefill_spans.size(), 2u);
  EXPECT_EQ(plan.prefill_spans[0].q_begin, 0);
  EXPECT_EQ(plan.prefill_spans[0].q_count, 3);
  EXPECT_EQ(plan.prefill_spans[1].q_begin, 3);
  EXPECT_TRUE(plan.prefill_spans[1].causal);
  // C's 130 cached tokens in chunks of 50, 50, 30; D has no context.
  ASSERT_EQ(plan.context_chunks.size(), 3u);
  EXPECT_EQ(plan.context_chunks[2].slots.size(), 30u);
  EXPECT_EQ(plan.context_chunks[1].slots.front(), 0 * 64 + 50);  // position 50: page 0
  EXPECT_EQ(plan.context_chunks[2].slots.front(), 1 * 64 + 36);  // position 100: page 1
  EXPECT_EQ(plan.context_chunks[2].slots.back(), 2 * 64 + 1);    // position 129: page 2
  for (const model::ContextChunk& chunk : plan.context_chunks) {
    ASSERT_EQ(chunk.spans.size(), 1u);
    EXPECT_FALSE(chunk.spans[0].causal);
    EXPECT_EQ(chunk.spans[0].q_begin, 0);
    EXPECT_EQ(chunk.spans[0].q_count, 3);
  }
}

TEST(StepPlan, MalformedBatchesAreRejected) {
  auto expect_error = [](model::ForwardBatch batch, const std::string& text) {
    try {
      model::make_step_plan(batch, {9, 64}, 100, 4096);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    }
  };
  model::ForwardBatch batch = two_decodes_two_prefills();
  std::swap(batch.sequences[1], batch.sequences[2]);
  expect_error(batch, "sequences tile the batch in order");
  batch = two_decodes_two_prefills();
  batch.slot_mapping[4] += 1;
  expect_error(batch,
               "row 4 (sequence 2, position 132) has slot 133, but its block table puts it "
               "at 132");
  batch = two_decodes_two_prefills();
  batch.positions[0] = 69;
  expect_error(batch, "has position 69, expected num_cached + 0 = 70");
  batch = two_decodes_two_prefills();
  batch.sequences[2].block_table = {0, 1};
  expect_error(batch, "sequence 2 holds 133 tokens but its block table lists 2 pages");
  batch = two_decodes_two_prefills();
  batch.sequences[0].block_table = {3, 9};
  expect_error(batch, "block_table[1] = 9 is not a page of the cache (0..8)");
  batch = two_decodes_two_prefills();
  batch.token_ids[3] = 100;
  expect_error(batch, "token id 100 at row 3 is outside the vocabulary (0..99)");
  batch = two_decodes_two_prefills();
  batch.logit_rows.push_back(7);
  expect_error(batch, "logit row 7 is not a row of the batch");
  // A decode after a prefill.
  batch = model::ForwardBatch{};
  batch.token_ids = {1, 2, 3};
  batch.positions = {0, 1, 0};
  batch.slot_mapping = {0, 1, 64};
  batch.sequences = {{0, 2, 0, {0}}, {2, 1, 0, {1}}};
  expect_error(batch, "decoding sequences come first");
}

TEST(Sampler, GreedyTopKAndSeeds) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.f, 2.0f};
  model::Sampler greedy({});
  EXPECT_EQ(greedy.sample(logits.data(), 5), 1);  // first of the tied maxima
  model::Sampler top1({1.5f, 1.0f, 1, 42});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(top1.sample(logits.data(), 5), 1);
  model::Sampler a({1.0f, 0.9f, 0, 7}), b({1.0f, 0.9f, 0, 7});
  std::vector<int> seen(5, 0);
  for (int i = 0; i < 200; ++i) {
    const int32_t x = a.sample(logits.data(), 5);
    EXPECT_EQ(x, b.sample(logits.data(), 5));
    ++seen[x];
  }
  EXPECT_EQ(seen[3], 0);  // outside the top-p nucleus
  EXPECT_GT(seen[2], 0);
  EXPECT_THROW(model::Sampler({-1.f, 1.f, 0, 0}), Error);
  EXPECT_THROW(model::Sampler({1.f, 0.f, 0, 0}), Error);
}

}  // namespace
}  // namespace mla

namespace mla {
namespace {

// The presets are the released config.json files: every field the model reads agrees with the
// configs above (typed from the Hugging Face repositories separately).
TEST(ModelPreset, PresetsAreTheReleasedConfigs) {
  const std::pair<const char*, const char*> cases[] = {{"deepseek-v2-lite", kV2LiteConfig},
                                                       {"deepseek-v3", kV3Config}};
  for (const auto& [name, json] : cases) {
    SCOPED_TRACE(name);
    const weights::ModelConfig preset = weights::model_preset(name);
    const weights::ModelConfig released =
        weights::parse_model_config(nlohmann::json::parse(json), name);
    EXPECT_EQ(weights::describe(preset), weights::describe(released));
    EXPECT_EQ(preset.hidden_size, released.hidden_size);
    EXPECT_EQ(preset.intermediate_size, released.intermediate_size);
    EXPECT_EQ(preset.moe_intermediate_size, released.moe_intermediate_size);
    EXPECT_EQ(preset.num_hidden_layers, released.num_hidden_layers);
    EXPECT_EQ(preset.num_attention_heads, released.num_attention_heads);
    EXPECT_EQ(preset.n_routed_experts, released.n_routed_experts);
    EXPECT_EQ(preset.n_shared_experts, released.n_shared_experts);
    EXPECT_EQ(preset.num_experts_per_tok, released.num_experts_per_tok);
    EXPECT_EQ(preset.first_k_dense_replace, released.first_k_dense_replace);
    EXPECT_EQ(preset.q_lora_rank, released.q_lora_rank);
    EXPECT_EQ(preset.vocab_size, released.vocab_size);
    EXPECT_DOUBLE_EQ(preset.softmax_scale(), released.softmax_scale());
    EXPECT_DOUBLE_EQ(preset.routed_scaling_factor, released.routed_scaling_factor);
  }
  try {
    weights::model_preset("deepseek-v9");
    ADD_FAILURE() << "no error for an unknown preset";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("known: deepseek-v2-lite, deepseek-v3"),
              std::string::npos)
        << error.what();
  }
}

// A decode plan padded for a step graph: the real rows unchanged, padding rows inert (seqlen 0,
// slot -1), the block table re-strided, the plan's logit rows first.
TEST(StepPlan, PaddedDecodePlanForStepGraphs) {
  model::ForwardBatch batch;
  batch.token_ids = {7, 9};
  batch.positions = {70, 5};
  batch.slot_mapping = {8 * 64 + 6, 5 * 64 + 5};
  batch.sequences = {{0, 1, 70, {3, 8}}, {1, 1, 5, {5}}};
  batch.logit_rows = {1, 0};
  const model::StepPlan plan = model::make_step_plan(batch, {9, 64}, 100, 4096);
  const model::StepPlan padded = model::pad_decode_plan(plan, 4, 3);
  EXPECT_EQ(padded.num_tokens, 4);
  EXPECT_EQ(padded.num_decode_tokens, 4);
  EXPECT_EQ(padded.token_ids, (std::vector<int32_t>{7, 9, 0, 0}));
  EXPECT_EQ(padded.positions, (std::vector<int32_t>{70, 5, 0, 0}));
  EXPECT_EQ(padded.slot_mapping, (std::vector<int64_t>{8 * 64 + 6, 5 * 64 + 5, -1, -1}));
  EXPECT_EQ(padded.decode_seqlens, (std::vector<int32_t>{71, 6, 0, 0}));
  EXPECT_EQ(padded.decode_max_pages, 3);
  EXPECT_EQ(padded.decode_block_table, (std::vector<int32_t>{3, 8, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(padded.logit_rows, (std::vector<int32_t>{1, 0, 2, 3}));
  EXPECT_TRUE(padded.prefill_spans.empty());
}

// Dummy weights on the CPU backend: the tiny V3 config's shapes, finite logits, deterministic.
TEST(DummyModel, RandomWeightsOfTheConfigsShapesRun) {
  const weights::ModelConfig config =
      weights::load_model_config(std::string(MLA_TEST_FIXTURES_DIR) + "/tiny-deepseek-v3");
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    model::CpuBackend backend;
    const auto model = model::Model::dummy(config, backend, {}, {}, /*seed=*/5);
    model::SequenceRunner sequence(*model, 64);
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
    const std::vector<float> logits = sequence.feed(prompt);
    ASSERT_EQ(static_cast<int>(logits.size()), config.vocab_size);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    if (run == 0)
      first = logits;
    else
      EXPECT_EQ(logits, first);
  }
}

}  // namespace
}  // namespace mla
