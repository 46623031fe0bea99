// Sampling (the same draws as model::Sampler for the same seed, min-p, penalties, logprobs) and
// stop strings over the real DeepSeek-V3 tokenizer (held-back text, stops across tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampling.h"
#include "engine/text_output.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

namespace mla {
namespace {

std::vector<float> random_logits(std::mt19937& rng, int vocab) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

TEST(Sampling, SameDrawsAsTheModelSamplerForTheSameSeed) {
  std::mt19937 rng(1);
  for (const auto& [temperature, top_k, top_p] :
       std::vector<std::tuple<float, int, float>>{{0.0f, 0, 1.0f},
                                                  {1.0f, 0, 1.0f},
                                                  {0.7f, 20, 1.0f},
                                                  {1.3f, 0, 0.8f},
                                                  {0.9f, 50, 0.95f}}) {
    engine::SamplingOptions options;
    options.temperature = temperature;
    options.top_k = top_k;
    options.top_p = top_p;
    engine::TokenSampler ours(options, 42);
    model::Sampler reference({temperature, top_p, top_k, 42});
    for (int i = 0; i < 200; ++i) {
      const auto logits = random_logits(rng, 300);
      ASSERT_EQ(ours.sample(logits, {}, {}, nullptr), reference.sample(logits.data(), 300));
    }
  }
}

TEST(Sampling, MinPKeepsOnlyTokensNearTheMostLikely) {
  std::vector<float> logits(100, 0.0f);
  logits[7] = 10.0f;
  logits[8] = 9.5f;  // p8 / p7 = e^-0.5 ≈ 0.61
  engine::SamplingOptions options;
  options.min_p = 0.5f;
  engine::TokenSampler sampler(options, 3);
  std::set<int32_t> seen;
  for (int i = 0; i < 300; ++i) seen.insert(sampler.sample(logits, {}, {}, nullptr));
  EXPECT_EQ(seen, (std::set<int32_t>{7, 8}));
}

TEST(Sampling, PenaltiesPushRepeatedTokensDown) {
  std::vector<float> logits = {5.0f, 4.9f, 1.0f, -1.0f};
  engine::SamplingOptions options;
  options.temperature = 0.0f;
  const std::vector<int32_t> generated = {0};
  EXPECT_EQ(engine::TokenSampler(options, 0).sample(logits, {}, generated, nullptr), 0);
  options.presence_penalty = 0.2f;
  EXPECT_EQ(engine::TokenSampler(options, 0).sample(logits, {}, generated, nullptr), 1);
  options.presence_penalty = 0.0f;
  options.frequency_penalty = 0.2f;
  EXPECT_EQ(engine::TokenSampler(options, 0).sample(logits, {}, generated, nullptr), 1);
  options.frequency_penalty = 0.0f;
  options.repetition_penalty = 1.1f;  // 5 / 1.1 < 4.9; the prompt counts too
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(engine::TokenSampler(options, 0).sample(logits, prompt, {}, nullptr), 1);
}

TEST(Sampling, LogprobsAreTheModelsLogSoftmaxWithTheTopN) {
  std::mt19937 rng(5);
  const auto logits = random_logits(rng, 50);
  engine::SamplingOptions options;
  options.temperature = 0.0f;
  options.presence_penalty = 1.0f;  // does not change the reported logprobs
  options.logprobs = 3;
  engine::TokenLogprobs logprobs;
  const int32_t chosen = engine::TokenSampler(options, 0).sample(logits, {}, {}, &logprobs);
  double total = 0.0;
  for (float logit : logits) total += std::exp(double(logit));
  EXPECT_NEAR(logprobs.logprob, logits[chosen] - std::log(total), 1e-5);
  ASSERT_EQ(logprobs.top.size(), 3u);
  EXPECT_EQ(logprobs.top[0].first, chosen);
  EXPECT_GE(logprobs.top[0].second, logprobs.top[1].second);
  EXPECT_GE(logprobs.top[1].second, logprobs.top[2].second);
}

TEST(Sampling, RefusesValuesOutOfRange) {
  engine::SamplingOptions options;
  options.min_p = 1.5f;
  EXPECT_THROW(engine::check_sampling_options(options), Error);
  options = {};
  options.logprobs = 21;
  EXPECT_THROW(engine::check_sampling_options(options), Error);
  options = {};
  options.temperature = -1.0f;
  EXPECT_THROW(engine::check_sampling_options(options), Error);
}

struct Streamed {
  std::string text;
  bool stopped = false;
};

Streamed stream_text(const tokenizer::Tokenizer& tokenizer, const std::string& text,
                     std::vector<std::string> stop, bool include_stop = false) {
  engine::TextOutput output(&tokenizer, std::move(stop), true, include_stop);
  Streamed result;
  for (int32_t id : tokenizer.encode(text, false)) {
    auto piece = output.push(id);
    result.text += piece.text;
    if (piece.stopped) {
      result.stopped = true;
      return result;
    }
  }
  result.text += output.finish();
  return result;
}

TEST(TextOutput, StopStringsAcrossTokensAndHeldBackText) {
  const auto tokenizer = tokenizer::Tokenizer::load(MLA_TEST_TOKENIZER_DIR);
  EXPECT_EQ(stream_text(tokenizer, "1 2 3 4 5 6", {}).text, "1 2 3 4 5 6");
  const Streamed stopped = stream_text(tokenizer, "1 2 3 4 5 6", {"3 4"});
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.text, "1 2 ");
  EXPECT_EQ(stream_text(tokenizer, "1 2 3 4 5 6", {"3 4"}, true).text, "1 2 3 4");
  EXPECT_EQ(stream_text(tokenizer, "1 2 3 4 5 6", {"9", " 5"}).text, "1 2 3 4");
  // A partial match is held back, then shown when it turns out not to be a stop.
  engine::TextOutput output(&tokenizer, {"Hello world!"}, true, false);
  std::string shown;
  for (int32_t id : tokenizer.encode("Hello world", false)) shown += output.push(id).text;
  EXPECT_EQ(shown, "") << "everything so far could start the stop string";
  EXPECT_EQ(output.push(tokenizer.encode(".", false)[0]).text, "Hello world.");
  EXPECT_EQ(output.finish(), "");
  // Non-ASCII text streams whole characters and finds stops inside it.
  EXPECT_EQ(stream_text(tokenizer, "深度求索 mla 😀 ok", {"😀"}).text, "深度求索 mla ");
}

}  // namespace
}  // namespace mla
