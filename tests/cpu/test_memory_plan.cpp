// The pure arithmetic under `mla bench` and the CUDA memory plan: the roofline bytes of a decode
// step (a tiny config counted by hand, the released V2-Lite config against its published size),
// the KV-cache budget (a hand-computed case and both refusals), and the synthetic batches the
// memory profile and the step benchmark run (each one a valid step for make_step_plan).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/memory_plan.h"
#include "model/roofline.h"
#include "model/step_plan.h"
#include "model/synthetic_batch.h"
#include "weights/presets.h"

namespace mla {
namespace {

// vocab 100, hidden 8, three layers (the first dense), two heads, kv_lora_rank 4, head dims 2/2/2,
// four routed experts (top 2, width 3) and one shared.
weights::ModelConfig tiny_config() {
  weights::ModelConfig c;
  c.vocab_size = 100;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 4;
  c.qk_nope_head_dim = 2;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 2;
  c.n_routed_experts = 4;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 3;
  c.first_k_dense_replace = 1;
  c.moe_layer_freq = 1;
  return c;
}

TEST(Roofline, TinyConfigCountedByHand) {
  const model::ModelWeightBytes w = model::model_weight_bytes(tiny_config());
  // Per layer: norms 2·8 + q_proj 2·4·8 + kv_a 6·8 + its norm 4 + kv_b 2·4·4 + o_proj 8·2·2 = 196.
  // Layer 0 adds the dense MLP 3·16·8 = 384; layers 1, 2 the router 4·8 and the shared expert
  // 3·3·8: 104 each. Plus lm_head 100·8 and the final norm 8: 808 + 580 + 600 = 1988 params.
  EXPECT_DOUBLE_EQ(w.dense, 1988 * 2.0);
  EXPECT_DOUBLE_EQ(w.embedding, 800 * 2.0);
  EXPECT_DOUBLE_EQ(w.one_expert, 3 * 3 * 8 * 2.0);
  EXPECT_EQ(w.num_moe_layers, 2);
  EXPECT_DOUBLE_EQ(w.total(), 3976 + 1600 + 144 * 4 * 2);

  // Two tokens of top-2 over 4 experts: 4·(1 − (1/2)²) = 3 distinct experts expected (by
  // enumeration: 2 with p 1/6, 4 with p 1/6, 3 with p 4/6).
  EXPECT_DOUBLE_EQ(model::expected_distinct_experts(4, 2, 2), 3.0);
  const model::DecodeStepBytes step = model::decode_step_bytes(tiny_config(), 2, 10);
  EXPECT_DOUBLE_EQ(step.experts_per_layer, 3.0);
  // dense 3976 + two embedding rows 2·8·2 + 3 experts · 144 · 2 layers.
  EXPECT_DOUBLE_EQ(step.weights, 3976 + 32 + 864);
  // 10 keys · 6 latent values · 2 bytes · 3 layers.
  EXPECT_DOUBLE_EQ(step.kv, 360);
  EXPECT_DOUBLE_EQ(step.total(), 5232);
}

TEST(Roofline, TiedEmbeddingIsReadWholeByLmHead) {
  weights::ModelConfig c = tiny_config();
  c.tie_word_embeddings = true;
  const model::ModelWeightBytes w = model::model_weight_bytes(c);
  EXPECT_DOUBLE_EQ(w.embedding, 0);
  EXPECT_DOUBLE_EQ(w.dense, 1988 * 2.0);
  EXPECT_DOUBLE_EQ(model::decode_step_bytes(c, 2, 10).weights, 3976 + 864);
}

TEST(Roofline, ReleasedConfigs) {
  // DeepSeek-V2-Lite: 15.7 B parameters; at batch 128 every one of the 64 experts is hit.
  const weights::ModelConfig lite = weights::model_preset("deepseek-v2-lite");
  const double params = model::model_weight_bytes(lite).total() / 2;
  EXPECT_GT(params, 15.6e9);
  EXPECT_LT(params, 15.8e9);
  EXPECT_NEAR(model::expected_distinct_experts(64, 6, 128), 64.0, 0.01);
  EXPECT_NEAR(model::expected_distinct_experts(64, 6, 1), 6.0, 1e-12);
  // The goal case: 128 sequences at 2k context (2049 keys each with the new token).
  const model::DecodeStepBytes step = model::decode_step_bytes(lite, 128, 128 * 2049);
  EXPECT_DOUBLE_EQ(step.kv, 128.0 * 2049 * 576 * 2 * 27);
  // Everything but the embedding table, of which the step reads 128 rows.
  const model::ModelWeightBytes lite_bytes = model::model_weight_bytes(lite);
  EXPECT_NEAR(step.weights, lite_bytes.total() - lite_bytes.embedding + 128 * 2048 * 2, 1e6);
  // DeepSeek-V3: 671 B parameters without its multi-token-prediction module (685 B with it).
  const weights::ModelConfig v3 = weights::model_preset("deepseek-v3");
  const double v3_params = model::model_weight_bytes(v3).total() / 2;
  EXPECT_GT(v3_params, 660e9);
  EXPECT_LT(v3_params, 675e9);
}

TEST(MemoryPlan, KvCacheByHand) {
  const weights::ModelConfig lite = weights::model_preset("deepseek-v2-lite");
  EXPECT_EQ(model::latent_page_bytes(lite), size_t(27) * 64 * 576 * 2);  // 1,990,656
  model::KvCacheInputs in;
  in.total_memory_bytes = 100'000'000'000;
  in.gpu_memory_utilization = 0.9;
  in.weight_bytes = 31'000'000'000;
  in.in_use_bytes = 40'000'000'000;
  in.graph_reserve_bytes = 1'000'000'000;
  in.page_bytes = model::latent_page_bytes(lite);
  // 90e9 − 40e9 − 1e9 = 49e9 bytes; 24615 pages take 48,999,997,440 of them.
  const model::KvCachePlan plan = model::plan_kv_cache(in);
  EXPECT_EQ(plan.budget_bytes, 90'000'000'000u);
  EXPECT_EQ(plan.num_pages, 24615);
  EXPECT_EQ(plan.kv_bytes, 48'999'997'440u);
  EXPECT_EQ(plan.num_tokens, 24615 * 64);
}

TEST(MemoryPlan, Refusals) {
  model::KvCacheInputs in;
  in.total_memory_bytes = 100'000'000'000;
  in.gpu_memory_utilization = 0.9;
  in.page_bytes = 1'990'656;
  in.weight_bytes = 95'000'000'000;  // more than 0.9 · 100 GB
  in.in_use_bytes = 96'000'000'000;
  try {
    model::plan_kv_cache(in);
    FAIL() << "weights over the budget were accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("the weights alone (95.00 GB) exceed"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(model::check_weights_fit(95'000'000'000, 100'000'000'000, 0.9), Error);
  EXPECT_NO_THROW(model::check_weights_fit(89'000'000'000, 100'000'000'000, 0.9));

  in.weight_bytes = 31'000'000'000;
  in.in_use_bytes = 89'000'000'000;
  in.graph_reserve_bytes = 500'000'000;  // 0.5 GB left: 251 pages, fewer than min_pages
  in.min_pages = 300;
  try {
    model::plan_kv_cache(in);
    FAIL() << "a cache smaller than min_pages was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no room for the latent cache"), std::string::npos)
        << error.what();
  }
  in.min_pages = 251;
  EXPECT_EQ(model::plan_kv_cache(in).num_pages, 251);

  EXPECT_THROW(model::memory_budget_bytes(1000, 0.0), Error);
  EXPECT_THROW(model::memory_budget_bytes(1000, 1.5), Error);
  EXPECT_EQ(model::memory_budget_bytes(1000, 1.0), 1000u);
}

TEST(MemoryPlan, ArenaForPeak) {
  constexpr size_t MiB = model::kMiB;
  EXPECT_EQ(model::arena_bytes_for_peak(1000 * MiB), 1164 * MiB);  // + 10 % + 64 MiB
  EXPECT_EQ(model::arena_bytes_for_peak(1), 66 * MiB);             // rounded up to 2 MiB
  EXPECT_EQ(model::arena_bytes_for_peak(0), 64 * MiB);
}

// Every profiled shape is a valid step on a cache of the pages it says it needs, and no sequence
// is longer than max_model_len.
void expect_valid(const model::SyntheticBatchShape& shape, int max_model_len) {
  const model::SyntheticBatch synthetic = model::make_synthetic_batch(shape, 100, 64, 3);
  const model::ForwardBatch& batch = synthetic.batch;
  ASSERT_NO_THROW(model::make_step_plan(batch, {synthetic.num_pages, 64}, 100, 4096));
  const model::StepPlan plan = model::make_step_plan(batch, {synthetic.num_pages, 64}, 100, 4096);
  // A one-token prefill sequence (a budget of one token) is a decode row to the plan.
  const int one_token_prefills =
      shape.prefill_tokens == shape.prefill_sequences ? shape.prefill_sequences : 0;
  EXPECT_EQ(plan.num_decode_tokens, shape.decode_rows + one_token_prefills);
  EXPECT_EQ(plan.num_tokens, shape.decode_rows + shape.prefill_tokens);
  EXPECT_EQ(batch.logit_rows.size(), size_t(shape.decode_rows + shape.prefill_sequences));
  int64_t context = 0;
  for (const model::SequenceSlice& s : batch.sequences) {
    EXPECT_LE(s.num_cached + s.num_tokens, max_model_len);
    if (s.num_tokens == 1) context += s.num_cached + 1;
  }
  EXPECT_EQ(synthetic.decode_context_tokens, context);
  int distinct = 0;
  for (int32_t id : batch.token_ids) distinct += id != batch.token_ids[0];
  if (batch.token_ids.size() > 4) {
    EXPECT_GT(distinct, 0);
  }
}

TEST(SyntheticBatch, ProfileShapesAreValidSteps) {
  struct Case {
    int budget, seqs, max_model_len;
  };
  for (const Case& c : {Case{2048, 256, 2000}, Case{2048, 64, 4096}, Case{8192, 256, 1024},
                        Case{1, 1, 2}, Case{7, 1, 100}, Case{3, 2, 5}, Case{4096, 3, 300}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.budget << " tokens, " << c.seqs << " seqs, len " << c.max_model_len);
    const auto shapes = model::memory_profile_shapes(c.budget, c.seqs, c.max_model_len);
    ASSERT_GE(shapes.size(), 2u);
    for (const auto& shape : shapes) {
      expect_valid(shape, c.max_model_len);
      EXPECT_LE(shape.decode_rows + shape.prefill_tokens, c.budget);
      EXPECT_LE(shape.decode_rows + shape.prefill_sequences, c.seqs);
    }
    EXPECT_EQ(shapes.back().decode_rows, std::min(c.seqs, c.budget));
    EXPECT_EQ(shapes.back().prefill_tokens, 0);
  }
  // The first prefill fills the budget, the first sequence up to max_model_len with context.
  const auto shapes = model::memory_profile_shapes(2048, 256, 2000);
  EXPECT_EQ(shapes[0].prefill_tokens, 2048);
  EXPECT_EQ(shapes[0].prefill_sequences, 4);
  EXPECT_EQ(shapes[0].first_prefill_context, 2000 - 512);
  EXPECT_EQ(shapes[1].decode_rows, 255 < 1024 ? 255 : 1024);
}

TEST(SyntheticBatch, DecodeBatchOfTheStepBenchmark) {
  const model::SyntheticBatch step = model::make_synthetic_batch({128, 2048, 0, 0, 0}, 102400);
  EXPECT_EQ(step.num_pages, 128 * 33);  // 2049 tokens in 33 pages each
  EXPECT_EQ(step.decode_context_tokens, 128 * 2049);
  const model::StepPlan plan =
      model::make_step_plan(step.batch, {step.num_pages, 64}, 102400, 4096);
  EXPECT_EQ(plan.num_decode_tokens, 128);
  EXPECT_EQ(plan.decode_seqlens, std::vector<int32_t>(128, 2049));
  expect_valid({3, 63, 5, 2, 10}, 80);
}

}  // namespace
}  // namespace mla
