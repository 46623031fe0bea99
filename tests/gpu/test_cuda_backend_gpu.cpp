// The CUDA backend on the whole model, against the Hugging Face fixtures and the CPU backend.
//
// The same three ways as the CPU golden test (whole prompt; chunks of 64 and 17, which exercise
// the cached-context path with LSE merges; token by token through the absorbed decode op with
// step graphs), with the shared experts folded into the routed experts' op and not, then: step
// graphs against eager steps, and batch invariance through the engine (one greedy request alone and
// among 63 others). The CUDA backend runs bf16 weights and activations, so logits are compared with
// a bf16 tolerance (stated below, measured values printed) everywhere but at the few tokens whose
// router nearly ties (the CPU backend measures each token's routing margin); greedy ids must be
// identical (the fixtures' top-1/top-2 margins are >= 0.018).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "gpu_test_support.h"
#include "model/cpu_backend.h"
#include "model/cuda_backend.h"
#include "model/model.h"
#include "tests/model_golden_support.h"

namespace mla {
namespace {

using testing::fixture_dir;
using testing::Golden;
using testing::load_golden;
using testing::max_abs;
using testing::max_abs_diff;
using testing::PathRun;
using testing::run_path;

// bf16 weights (relative rounding 2^-9) and bf16 activations between ops through two layers: the
// logits move by a few tenths of a percent of their range. 2 % of max |logit| is the bound; the
// measured figure is printed for the record.
constexpr float kLogitTolerance = 2e-2f;
// Except where the router nearly ties. The tiny models route every token of their last layer
// through top-k of random experts; where two candidates' choice values (ref::routing_margin) are
// closer than bf16 rounding moves them, the CUDA backend may pick the other expert and that
// token's logits move by up to the logits' own size. Such rows may exceed the tolerance only if
// the CPU backend's margin there is under kRoutingTieMargin (a few times the ~1e-3 shift bf16
// activations give a router score), and only a few of them: at most kMaxTieRows of all rows.
constexpr float kRoutingTieMargin = 1e-2f;
constexpr double kMaxTieRows = 0.05;

// (fixture, shared experts folded into the routed experts' grouped GEMM or run as their own MLP,
// the MLA input projections fused into one GEMM or run as two)
class CudaGoldenTest : public ::testing::TestWithParam<std::tuple<std::string, bool, bool>> {};

// Rows (positions) of `run` over `tolerance` against `reference`, each printed with the CPU
// backend's routing margin there; fails for a row whose margin is not a near tie. Returns how many.
int rows_over_tolerance(const char* what, const std::vector<float>& run,
                        const std::vector<float>& reference, int vocab, int first_position,
                        const std::vector<float>& margins, float tolerance) {
  const std::vector<float> errors = testing::row_max_abs_diff(run, reference, vocab);
  int over = 0;
  for (size_t row = 0; row < errors.size(); ++row) {
    if (errors[row] <= tolerance) continue;
    ++over;
    const size_t position = first_position + row;
    const float margin = position < margins.size() ? margins[position] : 0.0f;
    std::printf("[ cuda     ]   %s row at position %zu: max |diff| %.3g, routing margin %.4f\n",
                what, position, errors[row], margin);
    EXPECT_LT(margin, kRoutingTieMargin) << what << ": position " << position << " is off by "
                                         << errors[row] << " and its router did not nearly tie";
  }
  return over;
}

TEST_P(CudaGoldenTest, MatchesTransformersAndTheCpuBackendThreeWays) {
  MLA_REQUIRE_SM90_GPU();
  const std::string fixture = std::get<0>(GetParam());
  const std::string dir = fixture_dir(fixture);
  const Golden golden = load_golden(dir);
  model::ModelOptions options;
  options.context_chunk_tokens = 50;  // a 200-token context in four gathered pieces
  options.fold_shared_experts = std::get<1>(GetParam());
  options.fuse_input_projections = std::get<2>(GetParam());
  model::CudaBackend backend;
  const auto model = model::Model::load(dir, backend, options);
  testing::RoutingMarginBackend cpu_backend;
  const auto cpu_model = model::Model::load(dir, cpu_backend, options);

  const float scale = std::max(max_abs(golden.prompt_logits), max_abs(golden.generated_logits));
  const float tolerance = kLogitTolerance * scale;
  const PathRun cpu = run_path(*cpu_model, golden, 1);
  const std::vector<float>& margins = cpu_backend.margins;
  const int prompt = static_cast<int>(golden.prompt_ids.size());
  const int rows = prompt + static_cast<int>(golden.generated_ids.size());
  struct Way {
    const char* name;
    int chunk;
  };
  for (const Way& way : {Way{"whole prompt", prompt}, Way{"chunks of 64", 64},
                         Way{"chunks of 17", 17}, Way{"token by token", 1}}) {
    const PathRun r = run_path(*model, golden, way.chunk);
    const float prompt_error = max_abs_diff(r.prompt_logits, golden.prompt_logits);
    const float generated_error = max_abs_diff(r.generated_logits, golden.generated_logits);
    const float cpu_error = std::max(max_abs_diff(r.prompt_logits, cpu.prompt_logits),
                                     max_abs_diff(r.generated_logits, cpu.generated_logits));
    std::printf(
        "[ cuda     ] %s, %s: max |logit - HF| prompt %.3g, generated %.3g; vs CPU backend "
        "%.3g (max |logit| %.3g, tolerance %.3g)\n",
        fixture.c_str(), way.name, prompt_error, generated_error, cpu_error, scale, tolerance);
    // generated_logits[i] is the row of position prompt - 1 + i (the first is the prompt's last).
    const int tie_rows =
        rows_over_tolerance("prompt vs HF", r.prompt_logits, golden.prompt_logits, golden.vocab, 0,
                            margins, tolerance) +
        rows_over_tolerance("generated vs HF", r.generated_logits, golden.generated_logits,
                            golden.vocab, prompt - 1, margins, tolerance);
    rows_over_tolerance("prompt vs CPU", r.prompt_logits, cpu.prompt_logits, golden.vocab, 0,
                        margins, tolerance);
    rows_over_tolerance("generated vs CPU", r.generated_logits, cpu.generated_logits, golden.vocab,
                        prompt - 1, margins, tolerance);
    EXPECT_LE(tie_rows, kMaxTieRows * rows) << way.name << ": too many near-tie rows off";
    EXPECT_EQ(r.generated_ids, golden.generated_ids) << way.name;
  }
  EXPECT_GT(backend.stats().graphs_captured, 0);
  EXPECT_GT(backend.stats().graph_replays, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenTest,
                         ::testing::Combine(::testing::Values("tiny-deepseek-v2-lite",
                                                              "tiny-deepseek-v3"),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + (std::get<1>(info.param) ? "_folded" : "_shared_mlp") +
                                  (std::get<2>(info.param) ? "" : "_unfused_projections");
                         });

// Folding repacks the shared experts' down_proj and releases the original: the device holds the
// same weight bytes folded or not (2 shared experts on V2-Lite: two column blocks).
TEST(CudaBackend, FoldedSharedExpertsHoldTheSameWeightBytes) {
  MLA_REQUIRE_SM90_GPU();
  const std::string dir = fixture_dir("tiny-deepseek-v2-lite");
  model::ModelOptions plain_options;
  plain_options.fold_shared_experts = false;
  model::CudaBackend plain_backend, folded_backend;
  const auto plain = model::Model::load(dir, plain_backend, plain_options);
  const auto folded = model::Model::load(dir, folded_backend);
  ASSERT_TRUE(folded->options().fold_shared_experts);
  EXPECT_GT(plain_backend.stats().weight_bytes, 0u);
  EXPECT_EQ(folded_backend.stats().weight_bytes, plain_backend.stats().weight_bytes);
}

// Fusing the input projections stacks q_proj / q_a_proj and kv_a_proj_with_mqa into one weight
// and releases the originals: the device holds the same weight bytes fused or not, and the stacked
// weight holds the two originals' bf16 values, bit for bit.
TEST(CudaBackend, FusedInputProjectionsHoldTheSameWeightBytes) {
  MLA_REQUIRE_SM90_GPU();
  for (const char* fixture : {"tiny-deepseek-v2-lite", "tiny-deepseek-v3"}) {
    SCOPED_TRACE(fixture);
    const std::string dir = fixture_dir(fixture);
    model::ModelOptions plain_options;
    plain_options.fuse_input_projections = false;
    model::CudaBackend plain_backend, fused_backend;
    const auto plain = model::Model::load(dir, plain_backend, plain_options);
    const auto fused = model::Model::load(dir, fused_backend);
    ASSERT_TRUE(fused->options().fuse_input_projections);
    EXPECT_GT(plain_backend.stats().weight_bytes, 0u);
    EXPECT_EQ(fused_backend.stats().weight_bytes, plain_backend.stats().weight_bytes);
    const bool lora = fused->config().q_lora_rank > 0;
    for (int i = 0; i < fused->config().num_hidden_layers; ++i) {
      const model::LayerWeights& p = plain->layer(i);
      const model::LayerWeights& f = fused->layer(i);
      const model::Tensor& p_q = lora ? p.q_a_proj : p.q_proj;
      std::vector<float> want(static_cast<size_t>(p_q.numel()));
      plain_backend.copy_to_host(p_q, want.data());
      std::vector<float> kv_a(static_cast<size_t>(p.kv_a_proj_with_mqa.numel()));
      plain_backend.copy_to_host(p.kv_a_proj_with_mqa, kv_a.data());
      want.insert(want.end(), kv_a.begin(), kv_a.end());
      std::vector<float> got(static_cast<size_t>(f.input_proj.numel()));
      fused_backend.copy_to_host(f.input_proj, got.data());
      EXPECT_EQ(got, want) << "layer " << i;
    }
  }
}

// A replayed step graph computes what the eager step computes: the same kernels on the same data.
TEST(CudaBackend, StepGraphsGiveTheEagerLogits) {
  MLA_REQUIRE_SM90_GPU();
  const std::string dir = fixture_dir("tiny-deepseek-v3");
  const Golden golden = load_golden(dir);
  // One combine for both: kFast's automatic choice looks at the block table's width, which step
  // graphs pad (graph_max_context), so eager and graph steps could merge in different orders.
  // And cuBLAS's fixed choice for linear: two backends tune their GEMMs separately, by timing,
  // and may choose different algorithms (a graph replays what its own backend chose).
  model::CudaBackendOptions backend_options;
  backend_options.decode_combine = kernels::MlaDecodeCombine::kLaunched;
  backend_options.tuned_gemm = false;
  model::CudaBackend graph_backend(backend_options), eager_backend(backend_options);
  model::ModelOptions eager_options;
  eager_options.step_graphs = false;
  const auto graph_model = model::Model::load(dir, graph_backend);
  const auto eager_model = model::Model::load(dir, eager_backend, eager_options);
  const PathRun graphs = run_path(*graph_model, golden, 1);
  const PathRun eager = run_path(*eager_model, golden, 1);
  EXPECT_EQ(eager_backend.stats().graphs_captured, 0);
  EXPECT_GT(graph_backend.stats().graph_replays, 100);
  EXPECT_EQ(graphs.generated_ids, eager.generated_ids);
  const float diff = std::max(max_abs_diff(graphs.prompt_logits, eager.prompt_logits),
                              max_abs_diff(graphs.generated_logits, eager.generated_logits));
  std::printf("[ cuda     ] step graphs vs eager: max |logit diff| %.3g\n", diff);
  EXPECT_EQ(diff, 0.0f);
}

std::vector<int32_t> collect_one(engine::RequestStream& stream) {
  std::vector<int32_t> tokens;
  while (!stream.done()) {
    std::vector<engine::ChoiceUpdate> updates;
    if (!stream.wait(updates, std::chrono::seconds(120))) ADD_FAILURE() << "no update in 120 s";
    for (const engine::ChoiceUpdate& update : updates)
      for (const auto& token : update.tokens) tokens.push_back(token.id);
  }
  return tokens;
}

engine::EngineRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  engine::EngineRequest request;
  request.prompt = std::move(prompt);
  request.options.max_tokens = max_tokens;
  request.options.ignore_eos = true;
  request.options.sampling.temperature = 0.0f;
  return request;
}

// Through the engine on the CUDA backend: HF's greedy ids, and the same ids for a request alone
// and among 63 others (decode steps then run at batch sizes up to 64, through other graphs).
TEST(CudaBackend, EngineGivesHfIdsAloneAndInABatchOf64) {
  MLA_REQUIRE_SM90_GPU();
  const std::string dir = fixture_dir("tiny-deepseek-v3");
  const Golden golden = load_golden(dir);
  model::CudaBackend backend;
  const auto model = model::Model::load(dir, backend);
  engine::EngineOptions options;
  options.scheduler.max_model_len = 1024;
  options.check_invariants = true;
  const int length = static_cast<int>(golden.generated_ids.size());
  std::vector<int32_t> alone;
  {
    engine::ModelCacheRunner runner(*model, 64);
    engine::Engine engine(runner, options, nullptr);
    alone = collect_one(*engine.submit(greedy(golden.prompt_ids, length)));
  }
  EXPECT_EQ(alone, golden.generated_ids);

  engine::ModelCacheRunner runner(*model, 512);
  options.scheduler.max_num_batched_tokens = 2048;
  engine::Engine engine(runner, options, nullptr);
  std::mt19937 rng(11);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int i = 0; i < 63; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 200);
    for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % golden.vocab);
    streams.push_back(engine.submit(greedy(prompt, length + static_cast<int>(rng() % 8))));
    if (i == 31) streams.push_back(engine.submit(greedy(golden.prompt_ids, length)));
  }
  const std::vector<int32_t> among = collect_one(*streams[32]);
  for (auto& stream : streams) collect_one(*stream);
  int differing = 0;
  for (size_t i = 0; i < std::min(among.size(), alone.size()); ++i)
    differing += among[i] != alone[i];
  std::printf("[ cuda     ] batch invariance: %d of %zu greedy ids differ alone vs among 63\n",
              differing, alone.size());
  EXPECT_EQ(among, alone);
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.snapshot().pages_used, 0);
}

}  // namespace
}  // namespace mla
