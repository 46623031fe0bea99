// The engine on the real model (CPU backend, tiny fixtures): Hugging Face's greedy ids through the
// engine thread; a request's tokens do not depend on what else is in the batch (alone and among
// 20 others), on preemption (recompute), on forking (n > 1) or on prefix-cache hits; the queue
// limit; cancel frees pages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/mapped_file.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/cpu_backend.h"
#include "model/model.h"

namespace mla {
namespace {

using engine::ChoiceUpdate;
using engine::Engine;
using engine::EngineOptions;
using engine::EngineRequest;
using engine::FinishReason;
using engine::RequestStream;

struct Fixture {
  explicit Fixture(const std::string& name) {
    const std::string dir = std::string(MLA_TEST_FIXTURES_DIR) + "/" + name;
    golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
    model = model::Model::load(dir, backend);
  }
  model::CpuBackend backend;
  std::unique_ptr<model::Model> model;
  nlohmann::json golden;
};

struct Result {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> finish;
};

Result collect(RequestStream& stream) {
  Result result;
  result.tokens.resize(stream.num_choices());
  result.finish.resize(stream.num_choices(), FinishReason::kError);
  while (!stream.done()) {
    std::vector<ChoiceUpdate> updates;
    if (!stream.wait(updates, std::chrono::seconds(60))) ADD_FAILURE() << "no update in 60 s";
    for (const ChoiceUpdate& update : updates) {
      for (const auto& token : update.tokens) result.tokens[update.index].push_back(token.id);
      if (update.finish) result.finish[update.index] = *update.finish;
    }
  }
  return result;
}

EngineRequest greedy(std::vector<int32_t> prompt, int max_tokens, int n = 1) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.options.max_tokens = max_tokens;
  request.options.n = n;
  request.options.ignore_eos = true;
  request.options.sampling.temperature = 0.0f;
  return request;
}

EngineOptions engine_options(int max_model_len = 1024) {
  EngineOptions options;
  options.scheduler.max_model_len = max_model_len;
  options.check_invariants = true;
  return options;
}

TEST(EngineModel, GreedyIdsEqualHuggingFaceOnBothFixtures) {
  for (const std::string name : {"tiny-deepseek-v2-lite", "tiny-deepseek-v3"}) {
    SCOPED_TRACE(name);
    Fixture fixture(name);
    engine::ModelCacheRunner runner(*fixture.model, 64);
    EngineOptions options = engine_options();
    options.scheduler.max_num_batched_tokens = 64;  // the prompt goes in chunks
    Engine engine(runner, options, nullptr);
    const auto prompt = fixture.golden["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = fixture.golden["generated_ids"].get<std::vector<int32_t>>();
    auto stream = engine.submit(greedy(prompt, static_cast<int>(expected.size())));
    const Result result = collect(*stream);
    EXPECT_EQ(result.tokens[0], expected);
    EXPECT_EQ(result.finish[0], FinishReason::kLength);
    ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
    EXPECT_EQ(engine.snapshot().pages_used, 0);
  }
}

TEST(EngineModel, AGreedyRequestGivesTheSameTokensAloneAndAmongTwentyOthers) {
  Fixture fixture("tiny-deepseek-v3");
  const auto golden_prompt = fixture.golden["prompt_ids"].get<std::vector<int32_t>>();
  const EngineRequest target = greedy(golden_prompt, 24);
  std::vector<int32_t> alone;
  {
    engine::ModelCacheRunner runner(*fixture.model, 128);
    Engine engine(runner, engine_options(), nullptr);
    alone = collect(*engine.submit(target)).tokens[0];
  }
  engine::ModelCacheRunner runner(*fixture.model, 128);
  EngineOptions options = engine_options();
  options.scheduler.max_num_batched_tokens = 96;
  Engine engine(runner, options, nullptr);
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 120);
    for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % 256);
    EngineRequest request = greedy(prompt, 1 + static_cast<int>(rng() % 24));
    if (i % 2) {
      request.options.sampling.temperature = 0.8f;
      request.options.sampling.seed = i;
    }
    others.push_back(engine.submit(request));
    if (i == 9) others.push_back(engine.submit(target));  // in the middle of the crowd
  }
  const Result among = collect(*others[10]);
  EXPECT_EQ(among.tokens[0], alone);
  for (auto& stream : others) collect(*stream);
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.snapshot().pages_used, 0);
}

TEST(EngineModel, PreemptedForkedAndPrefixCachedRequestsGiveTheirAloneTokens) {
  Fixture fixture("tiny-deepseek-v2-lite");
  const auto prompt = fixture.golden["prompt_ids"].get<std::vector<int32_t>>();  // 200 ids
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(prompt.begin() + i * 10, prompt.begin() + 140 + i * 10);
    requests.push_back(greedy(p, 60, i == 2 ? 3 : 1));
    if (i == 4) {
      requests.back().options.sampling.temperature = 1.0f;
      requests.back().options.sampling.seed = 99;
    }
  }
  std::vector<std::vector<int32_t>> alone;
  for (const EngineRequest& request : requests) {
    engine::ModelCacheRunner runner(*fixture.model, 64);
    Engine engine(runner, engine_options(256), nullptr);
    alone.push_back(collect(*engine.submit(request)).tokens[0]);
  }
  // 14 pages for 6 requests of 3-4 pages each: preemption is certain.
  engine::ModelCacheRunner runner(*fixture.model, 14);
  Engine engine(runner, engine_options(256), nullptr);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) streams.push_back(engine.submit(request));
  for (size_t i = 0; i < requests.size(); ++i) {
    const Result result = collect(*streams[i]);
    for (const auto& tokens : result.tokens) EXPECT_EQ(tokens, alone[i]) << "request " << i;
  }
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_GT(engine.snapshot().preemptions, 0);
  EXPECT_EQ(engine.snapshot().pages_used, 0);
  // Again: the pages of the first requests are cached now.
  const auto again = engine.submit(requests[5]);
  EXPECT_EQ(collect(*again).tokens[0], alone[5]);
  EXPECT_EQ(again->cached_prompt_tokens(), 128);
  EXPECT_GT(engine.metrics().prefix_cache_hit_tokens.load(), 0u);
}

// A runner that takes at least `delay` per step: a tiny-model step takes well under a millisecond
// on the CPU, so without it a long request could end while a busy machine stalls the test thread.
class SlowRunner final : public engine::ModelRunner {
 public:
  SlowRunner(engine::ModelRunner& inner, std::chrono::milliseconds delay)
      : inner_(inner), delay_(delay) {}
  int vocab_size() const override { return inner_.vocab_size(); }
  int num_pages() const override { return inner_.num_pages(); }
  int max_position_embeddings() const override { return inner_.max_position_embeddings(); }
  std::vector<int32_t> eos_token_ids() const override { return inner_.eos_token_ids(); }
  std::vector<float> run(std::span<const engine::PageCopy> copies,
                         const model::ForwardBatch& batch) override {
    std::this_thread::sleep_for(delay_);
    return inner_.run(copies, batch);
  }

 private:
  engine::ModelRunner& inner_;
  std::chrono::milliseconds delay_;
};

TEST(EngineModel, QueueLimitRefusesBeyondAndCancelFreesPages) {
  Fixture fixture("tiny-deepseek-v3");
  // The running request must still run when the queue is probed: 3,900 tokens at 5 ms or more
  // per step last over 19 s (it is cancelled after its second token).
  constexpr int kLongRun = 3900;
  engine::ModelCacheRunner model_runner(*fixture.model, 66);
  SlowRunner runner(model_runner, std::chrono::milliseconds(5));
  EngineOptions options = engine_options(4096);
  options.scheduler.max_num_seqs = 1;
  options.max_queued_requests = 2;
  Engine engine(runner, options, nullptr);
  const auto prompt = fixture.golden["prompt_ids"].get<std::vector<int32_t>>();
  auto running = engine.submit(greedy(prompt, kLongRun));
  std::vector<ChoiceUpdate> updates;
  while (updates.size() < 2)  // it runs (and the step before the second token was counted)
    ASSERT_TRUE(running->wait(updates, std::chrono::seconds(30)));
  auto queued1 = engine.submit(greedy({1, 2, 3}, 5));
  auto queued2 = engine.submit(greedy({1, 2, 3}, 5));
  EXPECT_THROW(engine.submit(greedy({1, 2, 3}, 5)), engine::QueueFullError);
  EXPECT_GT(engine.snapshot().pages_used, 0);
  engine.cancel(running->id());
  const Result cancelled = collect(*running);
  EXPECT_EQ(cancelled.finish[0], FinishReason::kCancelled);
  EXPECT_LT(cancelled.tokens[0].size(), static_cast<size_t>(kLongRun));
  EXPECT_EQ(collect(*queued1).tokens[0].size(), 5u);
  EXPECT_EQ(collect(*queued2).tokens[0].size(), 5u);
  ASSERT_TRUE(engine.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.snapshot().pages_used, 0);
  EXPECT_THROW(engine.submit(greedy({1, 999}, 5)), Error);
}

}  // namespace
}  // namespace mla
