// The scheduler on FakeRunner (engine_test_support.h): randomized workloads with preemption,
// prefix sharing, forks, chunked prefill and cancels, with every invariant checked after every
// step and every request's tokens compared with the request run alone; plus the single rules
// (decodes first, admission by free pages, the running limit, cancel frees at once, the whole
// prompt cached, validation messages).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine_test_support.h"
#include "kvcache/page_allocator.h"

namespace mla {
namespace {

using engine::ChoiceUpdate;
using engine::EngineRequest;
using engine::FinishReason;
using engine::RequestStream;
using engine::Scheduler;
using engine::SchedulerOptions;

struct Choice {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
};

struct Driver {
  Driver(const SchedulerOptions& options, int num_pages, int vocab = 50,
         std::vector<int32_t> eos = {})
      : runner(num_pages, vocab, eos),
        scheduler(options, num_pages, vocab, eos, nullptr, &metrics) {}

  std::shared_ptr<RequestStream> add(EngineRequest request) {
    auto stream = std::make_shared<RequestStream>(next_id++, request.options.n,
                                                  static_cast<int>(request.prompt.size()));
    scheduler.add(std::move(request), stream, engine::Clock::now());
    return stream;
  }

  // One step; returns the number of tokens it ran.
  int step() {
    engine::StepSchedule schedule = scheduler.schedule();
    int tokens = 0;
    if (!schedule.empty()) {
      tokens = static_cast<int>(schedule.batch.token_ids.size());
      const std::vector<float> logits = runner.run(schedule.page_copies, schedule.batch);
      scheduler.complete(schedule, logits);
    }
    scheduler.check_invariants();
    max_running = std::max(max_running, scheduler.num_running());
    return tokens;
  }

  void run_until_idle(int max_steps = 100000) {
    for (int i = 0; i < max_steps && scheduler.has_work(); ++i) step();
    ASSERT_FALSE(scheduler.has_work());
  }

  engine::EngineMetrics metrics;
  testing::FakeRunner runner;
  Scheduler scheduler;
  uint64_t next_id = 1;
  int max_running = 0;
};

std::vector<Choice> drain(RequestStream& stream) {
  std::vector<Choice> choices(stream.num_choices());
  std::vector<ChoiceUpdate> updates;
  stream.wait(updates, std::chrono::milliseconds(0));
  for (const ChoiceUpdate& update : updates) {
    Choice& choice = choices.at(update.index);
    EXPECT_FALSE(choice.finish.has_value()) << "an update after the finish";
    for (const auto& token : update.tokens) choice.tokens.push_back(token.id);
    if (update.finish) choice.finish = update.finish;
  }
  return choices;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int count, int vocab) {
  std::vector<int32_t> tokens(count);
  for (int32_t& token : tokens) token = static_cast<int32_t>(rng() % vocab);
  return tokens;
}

EngineRequest greedy(std::vector<int32_t> prompt, int max_tokens, int n = 1) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.options.max_tokens = max_tokens;
  request.options.n = n;
  request.options.sampling.temperature = 0.0f;
  return request;
}

// What a request gives alone, on a roomy scheduler.
std::vector<Choice> alone(const EngineRequest& request, int vocab = 50,
                          std::vector<int32_t> eos = {}) {
  SchedulerOptions options;
  options.max_model_len = 1024;
  Driver driver(options, 256, vocab, eos);
  auto stream = driver.add(request);
  driver.run_until_idle();
  return drain(*stream);
}

TEST(Scheduler, RandomizedWorkloadsKeepEveryInvariantAndGiveEachRequestItsAloneOutput) {
  int64_t preemptions = 0, copies = 0, hits = 0, steps = 0;
  for (int seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("workload seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    SchedulerOptions options;
    options.max_num_batched_tokens = 40 + seed * 8;
    options.max_num_seqs = 3 + seed % 8;
    options.max_model_len = 512;
    const int num_pages = 10 + seed % 5;  // tight: preemption is routine
    const std::vector<int32_t> eos = {7};
    Driver driver(options, num_pages, 50, eos);

    // Shared prefixes (some a whole number of pages long), random suffixes, some sampled.
    std::vector<std::vector<int32_t>> bases = {random_tokens(rng, 128, 50),
                                               random_tokens(rng, 150, 50)};
    struct Planned {
      EngineRequest request;
      int arrival_step = 0;
      int cancel_step = -1;
      std::shared_ptr<RequestStream> stream;
    };
    std::vector<Planned> planned;
    for (int r = 0; r < 30; ++r) {
      EngineRequest request;
      const int kind = static_cast<int>(rng() % 4);
      if (kind < 2) {
        request.prompt = bases[kind];
        request.prompt.resize(64 * (1 + rng() % 2) + (rng() % 3 == 0 ? 0 : rng() % 40));
        request.prompt.resize(std::min<size_t>(request.prompt.size(), bases[kind].size()));
        auto suffix = random_tokens(rng, static_cast<int>(rng() % 50), 50);
        request.prompt.insert(request.prompt.end(), suffix.begin(), suffix.end());
      } else {
        request.prompt = random_tokens(rng, 1 + static_cast<int>(rng() % 300), 50);
      }
      request.options.max_tokens = 1 + static_cast<int>(rng() % 200);
      request.options.n = rng() % 4 == 0 ? 2 + static_cast<int>(rng() % 2) : 1;
      request.options.ignore_eos = rng() % 2 == 0;
      if (rng() % 2 == 0) {
        request.options.sampling.temperature = 0.0f;
      } else {
        request.options.sampling.temperature = 0.9f;
        request.options.sampling.top_k = static_cast<int>(rng() % 20);
        request.options.sampling.top_p = 0.9f;
        request.options.sampling.min_p = 0.05f;
        request.options.sampling.repetition_penalty = 1.1f;
        request.options.sampling.frequency_penalty = 0.3f;
        request.options.sampling.seed = rng();
      }
      Planned plan;
      plan.request = request;
      plan.arrival_step = static_cast<int>(rng() % 80);
      if (rng() % 6 == 0) plan.cancel_step = plan.arrival_step + static_cast<int>(rng() % 30);
      planned.push_back(std::move(plan));
    }

    int step = 0;
    bool pending = true;
    while (pending || driver.scheduler.has_work()) {
      pending = false;
      for (Planned& plan : planned) {
        if (plan.arrival_step == step) plan.stream = driver.add(plan.request);
        if (plan.arrival_step > step) pending = true;
        if (plan.cancel_step == step && plan.stream) {
          driver.scheduler.cancel(plan.stream->id());
          driver.scheduler.check_invariants();
        }
      }
      driver.step();
      ASSERT_LE(driver.runner.max_batch_tokens, options.max_num_batched_tokens);
      ASSERT_LT(++step, 100000) << "the workload does not finish";
    }

    EXPECT_EQ(driver.scheduler.pages().num_used(), 0);
    EXPECT_EQ(driver.scheduler.num_live_sequences(), 0);
    EXPECT_LE(driver.max_running, options.max_num_seqs);
    preemptions += driver.scheduler.num_preemptions();
    copies += driver.runner.copied_pages;
    hits += driver.metrics.prefix_cache_hit_tokens;
    steps += step;
    for (const Planned& plan : planned) {
      const std::vector<Choice> got = drain(*plan.stream);
      const std::vector<Choice> expected = alone(plan.request, 50, eos);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t c = 0; c < got.size(); ++c) {
        ASSERT_TRUE(got[c].finish.has_value()) << "every choice finishes";
        if (*got[c].finish == FinishReason::kCancelled) {
          ASSERT_LE(got[c].tokens.size(), expected[c].tokens.size());
          EXPECT_TRUE(
              std::equal(got[c].tokens.begin(), got[c].tokens.end(), expected[c].tokens.begin()));
        } else {
          EXPECT_EQ(got[c].tokens, expected[c].tokens);
          EXPECT_EQ(*got[c].finish, *expected[c].finish);
        }
      }
    }
  }
  // The workloads exercised what they are for (seen: hundreds of each).
  EXPECT_GT(preemptions, 50);
  EXPECT_GT(copies, 50);
  EXPECT_GT(hits, 50 * 64);
  std::printf(
      "20 workloads: %lld steps, %lld preemptions, %lld pages copied, %lld prompt tokens from the "
      "prefix cache\n",
      (long long)steps, (long long)preemptions, (long long)copies, (long long)hits);
}

TEST(Scheduler, DecodesRunEveryStepWhileALongPromptPrefillsInChunks) {
  SchedulerOptions options;
  options.max_num_batched_tokens = 32;
  options.max_model_len = 2048;
  Driver driver(options, 64);
  std::mt19937 rng(3);
  auto decoding = driver.add(greedy(random_tokens(rng, 10, 50), 60));
  driver.step();  // its prompt
  auto long_prompt = driver.add(greedy(random_tokens(rng, 1000, 50), 4));
  int steps = 0;
  while (drain(*long_prompt)[0].tokens.empty() && steps < 100) {
    std::vector<ChoiceUpdate> updates;
    const int tokens = driver.step();
    ASSERT_TRUE(decoding->wait(updates, std::chrono::milliseconds(0)))
        << "the decode got no token in step " << steps;
    EXPECT_LE(tokens, 32);
    ++steps;
  }
  EXPECT_GE(steps, 1000 / 31);  // the prompt went in chunks of at most 31 tokens
}

TEST(Scheduler, AdmissionWaitsForFreePagesAndNothingIsDropped) {
  SchedulerOptions options;
  options.max_model_len = 320;
  Driver driver(options, 12);  // room for two 300-token prompts at a time
  std::mt19937 rng(5);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i)
    streams.push_back(driver.add(greedy(random_tokens(rng, 300, 50), 10)));
  driver.step();
  EXPECT_EQ(driver.scheduler.num_running(), 2);
  EXPECT_EQ(driver.scheduler.num_waiting_requests(), 4);
  driver.run_until_idle();
  for (auto& stream : streams) {
    const auto choices = drain(*stream);
    EXPECT_EQ(choices[0].tokens.size(), 10u);
    EXPECT_EQ(*choices[0].finish, FinishReason::kLength);
  }
}

TEST(Scheduler, RunningLimitCountsEveryChoice) {
  SchedulerOptions options;
  options.max_num_seqs = 3;
  options.max_model_len = 256;
  Driver driver(options, 64);
  std::mt19937 rng(9);
  auto a = driver.add(greedy(random_tokens(rng, 20, 50), 20, 2));
  auto b = driver.add(greedy(random_tokens(rng, 20, 50), 20, 2));
  driver.step();
  EXPECT_EQ(driver.scheduler.num_waiting_requests(), 1) << "2 + 2 choices exceed 3";
  driver.run_until_idle();
  EXPECT_LE(driver.max_running, 3);
  EXPECT_EQ(drain(*b)[1].tokens.size(), 20u);
}

TEST(Scheduler, CancelFreesPagesAtOnce) {
  SchedulerOptions options;
  options.max_model_len = 512;
  Driver driver(options, 32);
  std::mt19937 rng(11);
  auto stream = driver.add(greedy(random_tokens(rng, 200, 50), 100));
  driver.step();
  driver.step();
  EXPECT_EQ(driver.scheduler.pages().num_used(), 4);
  EXPECT_TRUE(driver.scheduler.cancel(stream->id()));
  EXPECT_EQ(driver.scheduler.pages().num_used(), 0);
  driver.scheduler.check_invariants();
  const auto choices = drain(*stream);
  EXPECT_EQ(*choices[0].finish, FinishReason::kCancelled);
  EXPECT_TRUE(stream->done());
  EXPECT_FALSE(driver.scheduler.cancel(stream->id()));
}

TEST(Scheduler, PrefixCacheSharesFullPagesAndCopiesOnWriteWhenTheWholePromptIsCached) {
  SchedulerOptions options;
  options.max_model_len = 512;
  Driver driver(options, 32);
  std::mt19937 rng(13);
  const std::vector<int32_t> prompt = random_tokens(rng, 128, 50);  // two full pages
  auto first = driver.add(greedy(prompt, 8));
  driver.run_until_idle();
  EXPECT_EQ(first->cached_prompt_tokens(), 0);
  const int64_t copies = driver.runner.copied_pages;
  auto second = driver.add(greedy(prompt, 8));
  driver.run_until_idle();
  EXPECT_EQ(second->cached_prompt_tokens(), 127) << "all but the token fed again";
  EXPECT_EQ(driver.runner.copied_pages, copies + 1) << "the last page is copied, then written";
  EXPECT_EQ(drain(*second)[0].tokens, drain(*first)[0].tokens);

  // A longer prompt with the same first page shares that page only.
  std::vector<int32_t> longer(prompt.begin(), prompt.begin() + 64);
  const auto tail = random_tokens(rng, 30, 50);
  longer.insert(longer.end(), tail.begin(), tail.end());
  auto third = driver.add(greedy(longer, 4));
  driver.run_until_idle();
  EXPECT_EQ(third->cached_prompt_tokens(), 64);
  EXPECT_EQ(drain(*third)[0].tokens, alone(greedy(longer, 4))[0].tokens);
}

TEST(Scheduler, ChoicesForkFromOnePrefillAndCopyTheSharedLastPage) {
  SchedulerOptions options;
  options.max_model_len = 512;
  Driver driver(options, 32);
  std::mt19937 rng(17);
  const std::vector<int32_t> prompt = random_tokens(rng, 100, 50);
  auto stream = driver.add(greedy(prompt, 30, 3));
  driver.step();
  EXPECT_EQ(driver.scheduler.num_running(), 3);
  EXPECT_EQ(driver.scheduler.pages().num_used(), 2) << "the prompt's pages are shared";
  driver.run_until_idle();
  EXPECT_EQ(driver.runner.copied_pages, 2) << "two of three choices copy page 1 before writing";
  const auto choices = drain(*stream);
  const auto expected = alone(greedy(prompt, 30))[0].tokens;
  for (const auto& choice : choices) EXPECT_EQ(choice.tokens, expected);
}

TEST(Scheduler, SameSeedSameOutputAndChoicesDiffer) {
  std::mt19937 rng(19);
  EngineRequest request;
  request.prompt = random_tokens(rng, 40, 50);
  request.options.max_tokens = 30;
  request.options.n = 2;
  request.options.sampling.temperature = 1.0f;
  request.options.sampling.seed = 1234;
  const auto first = alone(request);
  const auto again = alone(request);
  EXPECT_EQ(first[0].tokens, again[0].tokens);
  EXPECT_EQ(first[1].tokens, again[1].tokens);
  EXPECT_NE(first[0].tokens, first[1].tokens) << "choice i draws with seed + i";
}

TEST(Scheduler, EosAndStopTokensEndAChoice) {
  std::mt19937 rng(23);
  EngineRequest request = greedy(random_tokens(rng, 30, 50), 200);
  const auto free_run = alone(request, 50, {});
  ASSERT_GE(free_run[0].tokens.size(), 5u);
  const int32_t stop = free_run[0].tokens[3];
  const auto with_eos = alone(request, 50, {stop});
  EXPECT_EQ(*with_eos[0].finish, FinishReason::kStop);
  EXPECT_EQ(with_eos[0].tokens.back(), stop);
  EXPECT_LE(with_eos[0].tokens.size(), 4u);
  request.options.stop_token_ids = {stop};
  EXPECT_EQ(alone(request)[0].tokens, with_eos[0].tokens);
  request.options.stop_token_ids.clear();
  request.options.ignore_eos = true;
  EXPECT_EQ(alone(request, 50, {stop})[0].tokens.size(), 200u);
}

TEST(Scheduler, RefusesRequestsThatCanNeverRun) {
  SchedulerOptions options;
  options.max_model_len = 256;
  options.max_num_seqs = 4;
  Driver driver(options, 16);
  auto message = [&](EngineRequest request) -> std::string {
    try {
      driver.scheduler.validate(request);
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_NE(message(greedy({}, 4)).find("the prompt is empty"), std::string::npos);
  EXPECT_NE(message(greedy({1, 50}, 4)).find("not in the model's vocabulary (0..49)"),
            std::string::npos);
  EXPECT_NE(message(greedy(std::vector<int32_t>(200, 1), 57)).find("context of 256 tokens"),
            std::string::npos);
  EXPECT_NE(message(greedy({1}, 0)).find("max_tokens must be >= 1"), std::string::npos);
  EXPECT_NE(message(greedy({1}, 4, 5)).find("n must be in [1, 4]"), std::string::npos);
  EngineRequest stops = greedy({1}, 4);
  stops.options.stop = {"x"};
  EXPECT_NE(message(stops).find("need a tokenizer"), std::string::npos);
  EngineRequest hot = greedy({1}, 4);
  hot.options.sampling.top_p = 0.0f;
  EXPECT_NE(message(hot).find("top_p must be in (0, 1]"), std::string::npos);
  EXPECT_EQ(message(greedy(std::vector<int32_t>(200, 1), 56)), "");
}

TEST(PageAllocator, CountsReferencesAndReusesWorthlessPagesFirst) {
  kvcache::PageAllocator pages(4);
  const std::vector<int32_t> tokens(64, 3);
  const int32_t a = *pages.allocate(), b = *pages.allocate();
  pages.retain(a);
  EXPECT_EQ(pages.ref_count(a), 2);
  EXPECT_EQ(pages.num_used(), 2);
  pages.publish(b, 0, tokens);
  pages.release(b);  // cached: to the tail
  pages.release(a);
  pages.release(a);  // not cached: to the head
  EXPECT_EQ(pages.num_free(), 4);
  pages.check(std::vector<int>(4, 0));
  EXPECT_EQ(*pages.allocate(), a);
  EXPECT_EQ(pages.find_cached(0, tokens), b);
  EXPECT_EQ(pages.find_cached(1, tokens), std::nullopt) << "another prefix before it";
  pages.retain(b);  // a hit takes it off the free list
  EXPECT_EQ(pages.num_free(), 2);
  pages.release(b);
  // Allocating everything evicts the cached page last.
  std::vector<int32_t> taken;
  while (const auto page = pages.allocate()) taken.push_back(*page);
  EXPECT_EQ(taken.back(), b);
  EXPECT_EQ(pages.find_cached(0, tokens), std::nullopt);
  EXPECT_EQ(pages.stats().evicted_pages, 1);
  EXPECT_THROW(pages.check(std::vector<int>(4, 0)), InternalError);  // they are owned
}

}  // namespace
}  // namespace mla
