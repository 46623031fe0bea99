// The CPU backend against Hugging Face transformers (fp32) on the tiny fixtures of tests/fixtures
// (made by tests/gen/make_fixtures.py), three ways: the prompt prefilled at once; in chunks of 64
// and of 17 tokens (the context path: later chunks attend to earlier chunks' cached latents,
// gathered in several workspace chunks and merged by LSE); and token by token through the
// absorbed decode path. Each way must match HF's logits (max |diff| <= 1e-3 · max |logit|) and
// greedy ids exactly, and the ways must agree with each other. Pages are handed out in a
// scrambled order and the cache starts as NaN, so a wrong block-table lookup cannot go unseen.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "tests/model_golden_support.h"
#include "weights/checkpoint.h"

namespace mla {
namespace {

using testing::fixture_dir;
using testing::Golden;
using testing::load_golden;
using testing::max_abs;
using testing::max_abs_diff;
using testing::PathRun;
using testing::run_path;

// (fixture, shared experts folded into the routed experts' op or run as their own MLP, the MLA
// input projections fused into one GEMM or run as two)
class GoldenTest : public ::testing::TestWithParam<std::tuple<std::string, bool, bool>> {};

TEST_P(GoldenTest, MatchesTransformersThreeWays) {
  const std::string fixture = std::get<0>(GetParam());
  const std::string dir = fixture_dir(fixture);
  const Golden golden = load_golden(dir);
  model::CpuBackend backend;
  // Small context chunks: a 200-token context is gathered in four pieces and merged by LSE.
  model::ModelOptions options;
  options.context_chunk_tokens = 50;
  options.fold_shared_experts = std::get<1>(GetParam());
  options.fuse_input_projections = std::get<2>(GetParam());
  const auto model = model::Model::load(dir, backend, options);
  ASSERT_EQ(model->config().vocab_size, golden.vocab);

  const float scale = std::max(max_abs(golden.prompt_logits), max_abs(golden.generated_logits));
  const float tolerance = 1e-3f * scale;
  struct Way {
    const char* name;
    int chunk;
  };
  const int whole = static_cast<int>(golden.prompt_ids.size());
  const std::vector<Way> ways = {
      {"whole prompt", whole}, {"chunks of 64", 64}, {"chunks of 17", 17}, {"token by token", 1}};
  std::vector<PathRun> runs;
  for (const Way& way : ways) {
    runs.push_back(run_path(*model, golden, way.chunk));
    const PathRun& r = runs.back();
    const float prompt_error = max_abs_diff(r.prompt_logits, golden.prompt_logits);
    const float generated_error = max_abs_diff(r.generated_logits, golden.generated_logits);
    std::printf(
        "[ golden   ] %s, %s: max |logit - HF| prompt %.3g, generated %.3g (max |logit| "
        "%.3g, tolerance %.3g)\n",
        fixture.c_str(), way.name, prompt_error, generated_error, scale, tolerance);
    EXPECT_LE(prompt_error, tolerance) << way.name;
    EXPECT_LE(generated_error, tolerance) << way.name;
    EXPECT_EQ(r.generated_ids, golden.generated_ids) << way.name;
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    const float error = std::max(max_abs_diff(runs[i].prompt_logits, runs[0].prompt_logits),
                                 max_abs_diff(runs[i].generated_logits, runs[0].generated_logits));
    std::printf("[ golden   ] %s, %s vs whole prompt: max |diff| %.3g\n", fixture.c_str(),
                ways[i].name, error);
    EXPECT_LE(error, tolerance) << ways[i].name;
    EXPECT_EQ(runs[i].generated_ids, runs[0].generated_ids) << ways[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest,
                         ::testing::Combine(::testing::Values("tiny-deepseek-v2-lite",
                                                              "tiny-deepseek-v3"),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + (std::get<1>(info.param) ? "_folded" : "_shared_mlp") +
                                  (std::get<2>(info.param) ? "" : "_unfused_projections");
                         });

// generate() (what `mla generate` runs) gives HF's greedy ids whichever way the prompt goes in.
TEST(Generate, GreedyIdsMatchTransformers) {
  const std::string dir = fixture_dir("tiny-deepseek-v3");
  const Golden golden = load_golden(dir);
  model::CpuBackend backend;
  const auto model = model::Model::load(dir, backend);
  ASSERT_TRUE(model->options().fold_shared_experts);  // the default
  for (int mode = 0; mode < 3; ++mode) {
    model::GenerateOptions options;
    options.max_tokens = static_cast<int>(golden.generated_ids.size());
    options.ignore_eos = true;
    options.prefill_chunk = mode == 1 ? 33 : 0;
    options.token_by_token = mode == 2;
    const model::GenerateResult result = model::generate(*model, golden.prompt_ids, options);
    EXPECT_EQ(result.ids, golden.generated_ids) << "mode " << mode;
  }
}

// Weight elements in a checkpoint (its FP8 scales left out): what a backend must hold.
int64_t checkpoint_weight_elements(const weights::Checkpoint& checkpoint) {
  int64_t elements = 0;
  for (const weights::TensorInfo* tensor : checkpoint.tensors())
    if (tensor->name.find("_scale_inv") == std::string::npos) elements += tensor->numel();
  return elements;
}

// Folding the shared experts: each MoE layer's experts end with n_shared_experts slices of the
// shared MLP (gate/up: row views of its weights; down: contiguous copies of its column blocks,
// equal to them value for value), the original down_proj is released, and the backend holds as
// many weight elements as the checkpoint has, folded or not.
TEST(FoldSharedExperts, ExpertsEndWithTheSharedSlicesAndNothingIsDuplicated) {
  const std::string dir = fixture_dir("tiny-deepseek-v2-lite");
  const weights::Checkpoint checkpoint = weights::Checkpoint::open(dir);
  const int64_t checkpoint_elements = checkpoint_weight_elements(checkpoint);
  model::CpuBackend plain_backend, folded_backend;
  model::ModelOptions plain_options;
  plain_options.fold_shared_experts = false;
  const model::Model plain(checkpoint, plain_backend, plain_options);
  const model::Model folded(checkpoint, folded_backend, {});
  EXPECT_EQ(plain_backend.stats().weight_elements, checkpoint_elements);
  EXPECT_EQ(folded_backend.stats().weight_elements, checkpoint_elements);
  const weights::ModelConfig& c = folded.config();
  ASSERT_GT(c.n_shared_experts, 1);  // several slices, so the column-block index math is exercised
  const int64_t width = c.moe_intermediate_size;
  const int64_t hidden = c.hidden_size;
  int moe_layers = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const model::LayerWeights& p = plain.layer(i);
    const model::LayerWeights& f = folded.layer(i);
    if (!f.is_moe) continue;
    ++moe_layers;
    EXPECT_EQ(p.folded_shared_experts, 0);
    EXPECT_EQ(p.experts.down_proj.size(), size_t(c.n_routed_experts));
    ASSERT_FALSE(p.shared_down_proj.empty());
    EXPECT_EQ(f.folded_shared_experts, c.n_shared_experts);
    EXPECT_TRUE(f.shared_down_proj.empty());
    const size_t all = size_t(c.n_routed_experts + c.n_shared_experts);
    ASSERT_EQ(f.experts.gate_proj.size(), all);
    ASSERT_EQ(f.experts.up_proj.size(), all);
    ASSERT_EQ(f.experts.down_proj.size(), all);
    for (int j = 0; j < c.n_shared_experts; ++j) {
      const model::Tensor& gate = f.experts.gate_proj[c.n_routed_experts + j];
      const model::Tensor& up = f.experts.up_proj[c.n_routed_experts + j];
      const model::Tensor& down = f.experts.down_proj[c.n_routed_experts + j];
      EXPECT_EQ(gate.storage, f.shared_gate_proj.storage);
      EXPECT_EQ(gate.as<float>(), f.shared_gate_proj.as<float>() + j * width * hidden);
      EXPECT_EQ(up.as<float>(), f.shared_up_proj.as<float>() + j * width * hidden);
      EXPECT_TRUE(gate.is_contiguous() && up.is_contiguous() && down.is_contiguous());
      ASSERT_EQ(down.shape[0], hidden);
      ASSERT_EQ(down.shape[1], width);
      const int64_t shared_width = p.shared_down_proj.shape[1];
      ASSERT_EQ(shared_width, c.n_shared_experts * width);
      for (int64_t r = 0; r < hidden; ++r)
        for (int64_t col = 0; col < width; ++col)
          ASSERT_EQ(down.as<float>()[r * width + col],
                    p.shared_down_proj.as<float>()[r * shared_width + j * width + col])
              << "layer " << i << " slice " << j << " row " << r << " column " << col;
    }
  }
  EXPECT_GT(moe_layers, 0);
}

// Fusing the input projections: q_proj (V2-Lite) or q_a_proj (V3) and kv_a_proj_with_mqa become
// row views of one stacked weight holding their values, the originals are released, and the
// backend holds as many weight elements as the checkpoint has, fused or not.
TEST(FuseInputProjections, ProjectionsAreRowViewsOfOneWeightAndNothingIsDuplicated) {
  for (const char* fixture : {"tiny-deepseek-v2-lite", "tiny-deepseek-v3"}) {
    SCOPED_TRACE(fixture);
    const std::string dir = fixture_dir(fixture);
    const weights::Checkpoint checkpoint = weights::Checkpoint::open(dir);
    const int64_t checkpoint_elements = checkpoint_weight_elements(checkpoint);
    model::CpuBackend plain_backend, fused_backend;
    model::ModelOptions plain_options;
    plain_options.fuse_input_projections = false;
    const model::Model plain(checkpoint, plain_backend, plain_options);
    const model::Model fused(checkpoint, fused_backend, {});
    ASSERT_TRUE(fused.options().fuse_input_projections);  // the default
    EXPECT_EQ(plain_backend.stats().weight_elements, checkpoint_elements);
    EXPECT_EQ(fused_backend.stats().weight_elements, checkpoint_elements);
    const weights::ModelConfig& c = fused.config();
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const model::LayerWeights& p = plain.layer(i);
      const model::LayerWeights& f = fused.layer(i);
      EXPECT_TRUE(p.input_proj.empty());
      ASSERT_FALSE(f.input_proj.empty());
      const model::Tensor& p_q = c.q_lora_rank > 0 ? p.q_a_proj : p.q_proj;
      const model::Tensor& f_q = c.q_lora_rank > 0 ? f.q_a_proj : f.q_proj;
      const int64_t q_rows = p_q.shape[0], kv_a_rows = p.kv_a_proj_with_mqa.shape[0];
      ASSERT_EQ(f.input_proj.shape[0], q_rows + kv_a_rows);
      ASSERT_EQ(f.input_proj.shape[1], c.hidden_size);
      EXPECT_EQ(f_q.storage, f.input_proj.storage);
      EXPECT_EQ(f.kv_a_proj_with_mqa.storage, f.input_proj.storage);
      EXPECT_EQ(f_q.as<float>(), f.input_proj.as<float>());
      EXPECT_EQ(f.kv_a_proj_with_mqa.as<float>(),
                f.input_proj.as<float>() + q_rows * c.hidden_size);
      EXPECT_TRUE(f_q.is_contiguous() && f.kv_a_proj_with_mqa.is_contiguous());
      const int64_t q_count = p_q.numel(), kv_a_count = p.kv_a_proj_with_mqa.numel();
      EXPECT_TRUE(std::equal(p_q.as<float>(), p_q.as<float>() + q_count, f.input_proj.as<float>()))
          << "layer " << i;
      EXPECT_TRUE(std::equal(p.kv_a_proj_with_mqa.as<float>(),
                             p.kv_a_proj_with_mqa.as<float>() + kv_a_count,
                             f.input_proj.as<float>() + q_count))
          << "layer " << i;
    }
  }
}

// The absorption stays a view: the backend holds exactly the checkpoint's weights (no absorbed
// W_Q·W_UK or W_UV·W_O was uploaded), W_UK/W_UV point into kv_b_proj, and a decode step allocates
// nothing but one-row activations.
TEST(Absorption, WeightsAreViewsAndNothingWeightSizedIsAllocated) {
  const std::string dir = fixture_dir("tiny-deepseek-v3");
  const weights::Checkpoint checkpoint = weights::Checkpoint::open(dir);
  const int64_t checkpoint_elements = checkpoint_weight_elements(checkpoint);
  model::CpuBackend backend;
  model::Model model(checkpoint, backend, {});
  EXPECT_EQ(backend.stats().weight_elements, checkpoint_elements);

  const model::LayerWeights& layer = model.layer(1);
  const float* kv_b = layer.kv_b_proj.as<float>();
  const int64_t kv_b_elements = layer.kv_b_proj.numel();
  for (const model::Tensor* view : {&layer.w_uk, &layer.w_uv}) {
    EXPECT_EQ(view->storage, layer.kv_b_proj.storage);
    EXPECT_GE(view->as<float>(), kv_b);
    EXPECT_LT(view->as<float>(), kv_b + kv_b_elements);
    EXPECT_EQ(view->shape[0], model.config().num_attention_heads);
    EXPECT_EQ(view->shape[2], model.config().kv_lora_rank);
  }
  EXPECT_EQ(layer.w_uv.as<float>() - layer.w_uk.as<float>(), 128 * 512);  // rows 128.. of a head

  model::SequenceRunner sequence(model, 80);
  const std::vector<int32_t> prompt = {5, 9, 200, 7};
  sequence.feed(prompt);
  backend.stats().log_allocations = true;
  for (int32_t token : {3, 17, 99}) sequence.feed(std::span<const int32_t>(&token, 1));
  ASSERT_FALSE(backend.stats().allocations.empty());
  for (const std::vector<int64_t>& shape : backend.stats().allocations)
    EXPECT_EQ(shape[0], 1) << "a decode step allocated a tensor with " << shape[0] << " rows";
}

}  // namespace
}  // namespace mla
