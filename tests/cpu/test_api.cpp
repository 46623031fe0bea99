// The API parser (server/api.h) without HTTP: what valid bodies become, and a randomized fuzz run
// (random JSON trees, mutated valid bodies, random bytes) in which every body either parses or
// throws ApiError with status 400; nothing else may escape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>

#include "server/api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mla {
namespace {

using nlohmann::json;
using server::ApiContext;
using server::ApiError;
using server::Endpoint;
using server::parse_request;

struct Api {
  Api() : tokenizer(tokenizer::Tokenizer::load(MLA_TEST_TOKENIZER_DIR)) {
    chat = tokenizer::ChatTemplate::from_config(tokenizer.config());
    context.model_name = "m";
    context.tokenizer = &tokenizer;
    context.chat_template = &*chat;
    context.vocab_size = tokenizer.vocab_size();
    context.max_model_len = 4096;
    context.max_n = 8;
  }
  tokenizer::Tokenizer tokenizer;
  std::optional<tokenizer::ChatTemplate> chat;
  ApiContext context;
};

Api& api() {
  static Api instance;
  return instance;
}

TEST(Api, ValidBodiesBecomeEngineRequests) {
  const ApiContext& context = api().context;
  auto parsed = parse_request(Endpoint::kCompletions,
                              R"({"model": "m", "prompt": ["Hello", [5, 6]], "n": 2,
                                  "max_tokens": 7, "temperature": 0.5, "top_k": -1,
                                  "stop": "x", "seed": -3, "logprobs": 2, "stream": true,
                                  "stream_options": {"include_usage": true}, "user": "ignored"})",
                              context);
  ASSERT_EQ(parsed.prompts.size(), 2u);
  EXPECT_EQ(parsed.prompts[0], api().tokenizer.encode("Hello"));
  EXPECT_EQ(parsed.prompts[1], (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(parsed.options.n, 2);
  EXPECT_EQ(parsed.options.max_tokens, 7);
  EXPECT_EQ(parsed.options.sampling.top_k, 0);
  EXPECT_EQ(parsed.options.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(*parsed.options.sampling.seed, uint64_t(-3));
  EXPECT_EQ(parsed.options.sampling.logprobs, 2);
  EXPECT_TRUE(parsed.stream && parsed.include_usage);

  parsed = parse_request(Endpoint::kChatCompletions,
                         R"({"model": "m", "messages": [{"role": "user", "content":
                             [{"type": "text", "text": "Hi"}]}], "logprobs": true,
                             "top_logprobs": 3})",
                         context);
  ASSERT_EQ(parsed.prompts.size(), 1u);
  const tokenizer::ChatMessage user{"user", "Hi"};
  EXPECT_EQ(parsed.prompts[0], api().tokenizer.encode(api().chat->render({&user, 1}, true), false));
  EXPECT_EQ(parsed.options.max_tokens, 4096 - static_cast<int>(parsed.prompts[0].size()))
      << "chat fills the context by default";
  EXPECT_EQ(parsed.options.sampling.logprobs, 3);
  EXPECT_EQ(parsed.options.sampling.temperature, 1.0f) << "OpenAI's default";
}

TEST(Api, ErrorsName400AndTheParameter) {
  try {
    parse_request(Endpoint::kCompletions, R"({"model": "m", "prompt": "a", "n": "2"})",
                  api().context);
    FAIL() << "accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, "n");
    const json body = server::error_body(error);
    EXPECT_EQ(body["error"]["message"], "'n' must be an integer");
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  }
}

json random_json(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 3 ? 6 : 8)) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng()) - (int64_t(1) << 31);
    case 3:
      return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 4:
      return std::string(rng() % 5, static_cast<char>('0' + rng() % 10));
    case 5:
      return int(rng() % 300);
    case 6: {
      json array = json::array();
      for (int i = int(rng() % 4); i > 0; --i) array.push_back(random_json(rng, depth + 1));
      return array;
    }
    default: {
      static const char* keys[] = {
          "model",      "prompt",         "messages", "role", "content",  "n",
          "max_tokens", "temperature",    "stop",     "seed", "logprobs", "top_logprobs",
          "stream",     "stream_options", "type",     "text", "top_p",    "top_k",
          "min_p",      "stop_token_ids", "best_of"};
      json object = json::object();
      for (int i = int(rng() % 5); i > 0; --i)
        object[keys[rng() % std::size(keys)]] = random_json(rng, depth + 1);
      return object;
    }
  }
}

TEST(Api, FuzzedBodiesParseOrGiveA400) {
  std::mt19937 rng(20261130);
  const std::string valid =
      R"({"model": "m", "prompt": "1 2", "max_tokens": 3, "messages": [{"role": "user",
          "content": "1"}], "stop": ["a"], "n": 2, "logprobs": 1})";
  int parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body;
    switch (i % 3) {
      case 0: {
        json tree = random_json(rng, 0);
        if (tree.is_object() && rng() % 2 == 0) tree["model"] = "m";
        if (tree.is_object() && rng() % 3 == 0) tree["prompt"] = "1";
        body = tree.dump();
        break;
      }
      case 1: {
        body = valid;
        for (int flips = 1 + int(rng() % 3); flips > 0; --flips)
          body[rng() % body.size()] = static_cast<char>(rng() % 256);
        if (rng() % 4 == 0) body.resize(rng() % body.size());
        break;
      }
      default:
        for (int n = int(rng() % 40); n > 0; --n) body += static_cast<char>(rng() % 256);
    }
    const Endpoint endpoint = rng() % 2 ? Endpoint::kCompletions : Endpoint::kChatCompletions;
    try {
      parse_request(endpoint, body, api().context);
      ++parsed;
    } catch (const ApiError& error) {
      ASSERT_EQ(error.status, 400) << body;
      ASSERT_FALSE(std::string(error.what()).empty()) << body;
      ++refused;
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(refused, 10000);
  std::printf("20000 fuzzed bodies: %d parsed, %d refused with 400\n", parsed, refused);
}

}  // namespace
}  // namespace mla
