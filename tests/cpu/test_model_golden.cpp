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
#include <vector>

#include "core/mapped_file.h"
#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"

namespace mla {
namespace {

std::string fixture_dir(const std::string& name) {
  return std::string(MLA_TEST_FIXTURES_DIR) + "/" + name;
}

struct Golden {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::vector<float> prompt_logits;     // [prompt, vocab]
  std::vector<float> generated_logits;  // [generated, vocab]
  int vocab = 0;
};

std::vector<float> read_f32(const weights::SafetensorsFile& file, const std::string& name) {
  const weights::TensorInfo* info = file.find(name);
  EXPECT_NE(info, nullptr) << name;
  std::vector<float> values(info->numel());
  weights::convert_to_f32(*info, values.data());
  return values;
}

Golden load_golden(const std::string& dir) {
  Golden golden;
  const nlohmann::json json = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  golden.prompt_ids = json["prompt_ids"].get<std::vector<int32_t>>();
  golden.generated_ids = json["generated_ids"].get<std::vector<int32_t>>();
  const weights::SafetensorsFile file(dir + "/golden.safetensors");
  golden.prompt_logits = read_f32(file, "prompt_logits");
  golden.generated_logits = read_f32(file, "generated_logits");
  golden.vocab = static_cast<int>(golden.prompt_logits.size() / golden.prompt_ids.size());
  return golden;
}

struct PathRun {
  std::vector<float> prompt_logits;     // [prompt, vocab]
  std::vector<int32_t> generated_ids;   // greedy, ours
  std::vector<float> generated_logits;  // [generated, vocab]
};

// Feeds the prompt `chunk` tokens per step (1: token by token, absorbed decode path), then
// generates greedily one token per step.
PathRun run_path(model::Model& model, const Golden& golden, int chunk) {
  const int prompt = static_cast<int>(golden.prompt_ids.size());
  const int generate = static_cast<int>(golden.generated_ids.size());
  const int capacity = prompt + generate;
  const int pages = (capacity + 63) / 64;
  // Pages in reverse order, pages 0 and 1 owned by nobody: the block table matters.
  std::vector<int32_t> page_order(pages);
  for (int i = 0; i < pages; ++i) page_order[i] = pages + 1 - i;
  model::SequenceRunner sequence(model, capacity, page_order);
  for (model::Tensor& layer : sequence.cache().layers)
    model.backend().fill(layer, std::numeric_limits<float>::quiet_NaN());

  PathRun result;
  for (int begin = 0; begin < prompt; begin += chunk) {
    const int count = std::min(chunk, prompt - begin);
    const std::vector<float> logits = sequence.feed(
        std::span<const int32_t>(golden.prompt_ids.data() + begin, count), /*all_logits=*/true);
    result.prompt_logits.insert(result.prompt_logits.end(), logits.begin(), logits.end());
  }
  std::vector<float> last(result.prompt_logits.end() - golden.vocab, result.prompt_logits.end());
  for (int i = 0; i < generate; ++i) {
    const int32_t next = model::argmax(last.data(), golden.vocab);
    result.generated_ids.push_back(next);
    result.generated_logits.insert(result.generated_logits.end(), last.begin(), last.end());
    if (i + 1 < generate) last = sequence.feed(std::span<const int32_t>(&next, 1));
  }
  return result;
}

float max_abs(const std::vector<float>& values) {
  float result = 0.f;
  for (float v : values) result = std::max(result, std::fabs(v));
  return result;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float result = 0.f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float diff = std::fabs(a[i] - b[i]);
    result = std::isnan(diff) ? std::numeric_limits<float>::infinity() : std::max(result, diff);
  }
  return result;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesTransformersThreeWays) {
  const std::string dir = fixture_dir(GetParam());
  const Golden golden = load_golden(dir);
  model::CpuBackend backend;
  // Small context chunks: a 200-token context is gathered in four pieces and merged by LSE.
  model::ModelOptions options;
  options.context_chunk_tokens = 50;
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
        GetParam().c_str(), way.name, prompt_error, generated_error, scale, tolerance);
    EXPECT_LE(prompt_error, tolerance) << way.name;
    EXPECT_LE(generated_error, tolerance) << way.name;
    EXPECT_EQ(r.generated_ids, golden.generated_ids) << way.name;
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    const float error = std::max(max_abs_diff(runs[i].prompt_logits, runs[0].prompt_logits),
                                 max_abs_diff(runs[i].generated_logits, runs[0].generated_logits));
    std::printf("[ golden   ] %s, %s vs whole prompt: max |diff| %.3g\n", GetParam().c_str(),
                ways[i].name, error);
    EXPECT_LE(error, tolerance) << ways[i].name;
    EXPECT_EQ(runs[i].generated_ids, runs[0].generated_ids) << ways[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest,
                         ::testing::Values("tiny-deepseek-v2-lite", "tiny-deepseek-v3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// generate() (what `mla generate` runs) gives HF's greedy ids whichever way the prompt goes in.
TEST(Generate, GreedyIdsMatchTransformers) {
  const std::string dir = fixture_dir("tiny-deepseek-v3");
  const Golden golden = load_golden(dir);
  model::CpuBackend backend;
  const auto model = model::Model::load(dir, backend);
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

// The absorption stays a view: the backend holds exactly the checkpoint's weights (no absorbed
// W_Q·W_UK or W_UV·W_O was uploaded), W_UK/W_UV point into kv_b_proj, and a decode step allocates
// nothing but one-row activations.
TEST(Absorption, WeightsAreViewsAndNothingWeightSizedIsAllocated) {
  const std::string dir = fixture_dir("tiny-deepseek-v3");
  const weights::Checkpoint checkpoint = weights::Checkpoint::open(dir);
  int64_t checkpoint_elements = 0;
  for (const weights::TensorInfo* tensor : checkpoint.tensors())
    if (tensor->name.find("_scale_inv") == std::string::npos)
      checkpoint_elements += tensor->numel();
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
