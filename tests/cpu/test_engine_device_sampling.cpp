// The engine's device-sampling path (Scheduler::sampling_rows → ModelRunner::run_and_sample →
// Scheduler::complete_sampled) on the CPU: a CPU backend whose sample() is the GPU sampler's exact
// twin (ref::sample_row), so CI checks the bookkeeping the CUDA backend relies on: which row and
// which (seed, step) each choice draws with, logprobs, n > 1, a crowd and preemption.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "engine/engine.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "ref/sampling_ref.h"

namespace mla {
namespace {

// The CPU backend with "device" sampling by the GPU sampler's twin.
class TwinSamplingBackend final : public model::CpuBackend {
 public:
  bool samples_on_device() const override { return true; }
  std::vector<model::RowSample> sample(const model::Tensor& logits,
                                       std::span<const model::RowSampling> rows) override {
    const int64_t vocab = logits.shape[1];
    std::vector<float> host(static_cast<size_t>(logits.numel()));
    copy_to_host(logits, host.data());
    std::vector<model::RowSample> samples;
    for (const model::RowSampling& r : rows) {
      ++draws;
      std::vector<int32_t> context(r.prompt.begin(), r.prompt.end());
      context.insert(context.end(), r.generated.begin(), r.generated.end());
      ref::SampledLogprobs logprobs;
      model::RowSample sample;
      sample.token =
          ref::sample_row(std::span<const float>(host.data() + int64_t(r.logit_row) * vocab, vocab),
                          r.params, context, static_cast<int64_t>(r.prompt.size()), &logprobs);
      sample.logprob = logprobs.logprob;
      sample.top = logprobs.top;
      samples.push_back(std::move(sample));
    }
    return samples;
  }
  int64_t draws = 0;
};

struct Fixture {
  explicit Fixture(const std::string& name) {
    const std::string dir = std::string(MLA_TEST_FIXTURES_DIR) + "/" + name;
    golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
    model = model::Model::load(dir, backend);
  }
  TwinSamplingBackend backend;
  std::unique_ptr<model::Model> model;
  nlohmann::json golden;
};

struct Choices {
  std::vector<std::vector<engine::GeneratedToken>> tokens;
};

Choices collect(engine::RequestStream& stream) {
  Choices result;
  result.tokens.resize(stream.num_choices());
  while (!stream.done()) {
    std::vector<engine::ChoiceUpdate> updates;
    if (!stream.wait(updates, std::chrono::seconds(60))) ADD_FAILURE() << "no update in 60 s";
    for (engine::ChoiceUpdate& update : updates)
      for (auto& token : update.tokens) result.tokens[update.index].push_back(token);
  }
  return result;
}

std::vector<int32_t> ids(const std::vector<engine::GeneratedToken>& tokens) {
  std::vector<int32_t> result;
  for (const auto& token : tokens) result.push_back(token.id);
  return result;
}

engine::EngineOptions engine_options() {
  engine::EngineOptions options;
  options.scheduler.max_model_len = 1024;
  options.check_invariants = true;
  return options;
}

engine::EngineRequest sampled(std::vector<int32_t> prompt, int max_tokens, int n, uint64_t seed) {
  engine::EngineRequest request;
  request.prompt = std::move(prompt);
  request.options.max_tokens = max_tokens;
  request.options.n = n;
  request.options.ignore_eos = true;
  request.options.sampling.temperature = 0.9f;
  request.options.sampling.top_p = 0.95f;
  request.options.sampling.top_k = 40;
  request.options.sampling.repetition_penalty = 1.1f;
  request.options.sampling.frequency_penalty = 0.3f;
  request.options.sampling.logprobs = 3;
  request.options.sampling.seed = seed;
  return request;
}

TEST(EngineDeviceSampling, GreedyIdsEqualHuggingFace) {
  Fixture fixture("tiny-deepseek-v3");
  engine::ModelCacheRunner runner(*fixture.model, 64);
  ASSERT_TRUE(runner.samples_on_device());
  engine::Engine engine(runner, engine_options(), nullptr);
  const auto prompt = fixture.golden["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = fixture.golden["generated_ids"].get<std::vector<int32_t>>();
  engine::EngineRequest request;
  request.prompt = prompt;
  request.options.max_tokens = static_cast<int>(expected.size());
  request.options.ignore_eos = true;
  request.options.sampling.temperature = 0.0f;
  EXPECT_EQ(ids(collect(*engine.submit(request)).tokens[0]), expected);
  EXPECT_EQ(fixture.backend.draws, static_cast<int64_t>(expected.size()));
}

// Choice i of an n = 3 request with seed s draws with seed s + i at steps 0, 1, ...: exactly the
// tokens a one-choice request with seed s + i gets, in a crowd or alone, preempted or not.
TEST(EngineDeviceSampling, EachChoiceDrawsWithItsOwnSeedAndStep) {
  Fixture fixture("tiny-deepseek-v2-lite");
  const auto prompt = fixture.golden["prompt_ids"].get<std::vector<int32_t>>();
  const uint64_t seed = 1234;
  std::vector<std::vector<int32_t>> alone(3);
  for (int i = 0; i < 3; ++i) {
    engine::ModelCacheRunner runner(*fixture.model, 64);
    engine::Engine engine(runner, engine_options(), nullptr);
    const Choices c = collect(*engine.submit(sampled(prompt, 30, 1, seed + i)));
    alone[i] = ids(c.tokens[0]);
    ASSERT_EQ(alone[i].size(), 30u);
    for (const auto& token : c.tokens[0]) {
      ASSERT_EQ(token.logprobs.top.size(), 3u);
      EXPECT_GE(token.logprobs.top[0].second, token.logprobs.top[1].second);
      EXPECT_GE(token.logprobs.top[1].second, token.logprobs.top[2].second);
      EXPECT_LE(token.logprobs.logprob, 0.0f);
      EXPECT_LE(token.logprobs.logprob, token.logprobs.top[0].second);
    }
  }
  EXPECT_NE(alone[0], alone[1]);  // different seeds draw differently (30 tokens from 256)

  // Together as one request of three choices, among other requests, in a cache small enough that
  // sequences are preempted and recomputed.
  engine::ModelCacheRunner runner(*fixture.model, 14);
  engine::EngineOptions options = engine_options();
  options.scheduler.max_model_len = 256;  // the prompt (200) and 30 more: 4 pages
  options.scheduler.max_num_batched_tokens = 64;
  engine::Engine engine(runner, options, nullptr);
  std::mt19937 rng(5);
  std::vector<std::shared_ptr<engine::RequestStream>> others;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> other(100 + rng() % 80);
    for (int32_t& id : other) id = static_cast<int32_t>(rng() % 256);
    others.push_back(engine.submit(sampled(other, 60, 1 + i % 2, 77 + i)));
  }
  auto target = engine.submit(sampled(prompt, 30, 3, seed));
  const Choices together = collect(*target);
  for (auto& stream : others) collect(*stream);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ids(together.tokens[i]), alone[i]) << "choice " << i;
  EXPECT_GT(engine.snapshot().preemptions, 0) << "the cache was meant to force preemption";
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.snapshot().pages_used, 0);
}

}  // namespace
}  // namespace mla
