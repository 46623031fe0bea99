// The GPU sampler's CPU twin (ref::sample_row) against the engine's sampler: greedy is the first
// maximum, penalties are engine::TokenSampler's (hand-computed cases and random ones), the
// log-probabilities are the engine's, and the draw has model::draw_token's distribution (20,000
// draws on a small vocab, chi-square against the exact probabilities of draw_token's definition).
// Also the shared arithmetic of sampling_math.h: the exponential, the keys, the 64-bit product.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/sampling.h"
#include "model/sampler.h"
#include "ref/sampling_ref.h"

namespace mla {
namespace {

using kernels::SamplingRowParams;
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingRowParams greedy_params() {
  SamplingRowParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(SamplingMath, ExpIsAccurateExactAtZeroAndZeroBelowRange) {
  EXPECT_EQ(kernels::sampling_exp(0.0f), 1.0f);
  EXPECT_EQ(kernels::sampling_exp(-0.0f), 1.0f);
  EXPECT_EQ(kernels::sampling_exp(-kInf), 0.0f);
  EXPECT_EQ(kernels::sampling_exp(std::nanf("")), 0.0f);
  EXPECT_EQ(kernels::sampling_exp(-88.0f), 0.0f);
  double worst = 0.0;
  float previous = 0.0f;
  int decreases = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -86.9f + 86.9f * float(i) / 2000000.0f;
    const float got = kernels::sampling_exp(x);
    worst = std::max(worst, std::fabs(got / std::exp(double(x)) - 1.0));
    if (got < previous) ++decreases;
    previous = got;
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_LT(decreases, 2000) << "an approximation may wiggle by an ulp, not more often";
}

TEST(SamplingMath, KeysOrderByValueThenLowerIdAndRoundTrip) {
  const int64_t vocab = 129280;
  const int bits = kernels::sampling_id_bits(vocab);
  EXPECT_EQ(bits, 17);
  EXPECT_EQ(kernels::sampling_id_bits(1), 0);
  EXPECT_EQ(kernels::sampling_id_bits(2), 1);
  EXPECT_EQ(kernels::sampling_key_digits(17), 7);
  EXPECT_EQ(kernels::sampling_key_digits(0), 4);
  const float values[] = {-kInf, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f, kInf};
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      for (int64_t ia : {int64_t(0), int64_t(5), vocab - 1})
        for (int64_t ib : {int64_t(0), int64_t(7), vocab - 1}) {
          const uint64_t ka = kernels::sampling_key(values[a], ia, bits, vocab);
          const uint64_t kb = kernels::sampling_key(values[b], ib, bits, vocab);
          const bool a_first = values[a] > values[b] || (values[a] == values[b] && ia < ib);
          const bool same = values[a] == values[b] && ia == ib;
          EXPECT_EQ(ka > kb, a_first && !same)
              << values[a] << "@" << ia << " " << values[b] << "@" << ib;
          EXPECT_EQ(kernels::sampling_key_id(ka, bits, vocab), ia);
          const float back = kernels::sampling_key_value(ka);
          EXPECT_EQ(back, values[a]);
          EXPECT_FALSE(std::signbit(back) && back == 0.0f) << "-0 becomes +0";
        }
  EXPECT_EQ(kernels::sampling_key_id(kernels::sampling_key(1.0f, 0, 0, 1), 0, 1), 0);
}

TEST(SamplingMath, ScaledRandomIsTheHigh64BitsOfTheProduct) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t a = rng(), b = i % 3 == 0 ? rng() >> (i % 60) : rng();
    __extension__ const unsigned __int128 product = (unsigned __int128)a * b;
    ASSERT_EQ(kernels::sampling_scale_random(a, b), uint64_t(product >> 64)) << a << " " << b;
  }
  EXPECT_EQ(kernels::sampling_top_p_need(1.0f, 1000), 1000u);
  EXPECT_EQ(kernels::sampling_top_p_need(0.5f, 1001), 501u);
  EXPECT_EQ(kernels::sampling_top_p_need(1e-30f, 1000), 1u);
}

TEST(SamplingRef, GreedyIsTheFirstMaximum) {
  const SamplingRowParams p = greedy_params();
  const std::vector<float> ties = {1.0f, 3.0f, -kInf, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(ref::sample_row(ties, p, {}, 0, nullptr), 1);
  const std::vector<float> zeros = {-1.0f, -0.0f, 0.0f, -0.0f};
  EXPECT_EQ(ref::sample_row(zeros, p, {}, 0, nullptr), 1);  // -0 == +0: the first one
  const std::vector<float> all_inf(5, -kInf);
  EXPECT_EQ(ref::sample_row(all_inf, p, {}, 0, nullptr), 0);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(1 + rng() % 3000);
    for (float& x : logits) x = float(int(rng() % 9)) * 0.5f - 2.0f;  // many exact ties
    EXPECT_EQ(ref::sample_row(logits, p, {}, 0, nullptr),
              model::argmax(logits.data(), int(logits.size())));
  }
  // A temperature with top_k 1 is greedy too; so is a row whose maximum is -inf.
  SamplingRowParams top1;
  top1.top_k = 1;
  EXPECT_EQ(ref::sample_row(ties, top1, {}, 0, nullptr), 1);
  EXPECT_EQ(ref::sample_row(all_inf, SamplingRowParams{}, {}, 0, nullptr), 0);
}

TEST(SamplingRef, PenaltiesHandComputed) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.5f};
  // Prompt {0, 1, 0}; generated {3, 3, 1, 9 (out of range: ignored)}.
  const std::vector<int32_t> context = {0, 1, 0, 3, 3, 1, 9};
  SamplingRowParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<float> got = ref::penalise_logits(logits, p, context, 3);
  // 0: prompt only, positive: 2 / 2. 1: seen, negative: -1 · 2, then generated once: -2 - 0.75.
  // 2, 4, 5: unseen. 3: generated twice: 3 / 2 - (2 · 0.5 + 0.25).
  const std::vector<float> want = {1.0f, -2.75f, 0.5f, 0.25f, -2.0f, 1.5f};
  EXPECT_EQ(got, want);
  // The repetition penalty counts a token once however often it repeats; frequency by count.
  SamplingRowParams frequency_only;
  frequency_only.frequency_penalty = -1.5f;
  EXPECT_EQ(ref::penalise_logits(logits, frequency_only, std::vector<int32_t>{5, 5, 5, 2}, 0),
            (std::vector<float>{2.0f, -1.0f, 2.0f, 3.0f, -2.0f, 6.0f}));
  SamplingRowParams repetition_only;
  repetition_only.repetition_penalty = 0.5f;  // < 1 favours repeats
  EXPECT_EQ(ref::penalise_logits(logits, repetition_only, std::vector<int32_t>{4, 4, 4, 0}, 4),
            (std::vector<float>{4.0f, -1.0f, 0.5f, 3.0f, -1.0f, 1.5f}));
}

TEST(SamplingRef, PenalisedGreedyMatchesTheEngine) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int vocab = 1 + int(rng() % 200);
    std::vector<float> logits(vocab);
    for (float& x : logits) x = float(int(rng() % 41) - 20) * 0.25f;
    std::vector<int32_t> prompt(rng() % 30), generated(rng() % 30);
    for (int32_t& id : prompt) id = int32_t(rng() % std::min(vocab, 12));
    for (int32_t& id : generated) id = int32_t(rng() % std::min(vocab, 12));
    engine::SamplingOptions options;
    options.temperature = 0.0f;
    options.repetition_penalty = std::array{1.0f, 1.3f, 0.7f, 2.5f}[rng() % 4];
    options.presence_penalty = std::array{0.0f, 0.5f, -1.25f, 2.0f}[rng() % 4];
    options.frequency_penalty = std::array{0.0f, 0.3f, -0.7f, -2.0f}[rng() % 4];
    options.logprobs = int(rng() % 22) - 1;
    engine::TokenSampler engine_sampler(options, 1);
    engine::TokenLogprobs engine_logprobs;
    const int32_t want = engine_sampler.sample(logits, prompt, generated, &engine_logprobs);

    SamplingRowParams p = greedy_params();
    p.repetition_penalty = options.repetition_penalty;
    p.presence_penalty = options.presence_penalty;
    p.frequency_penalty = options.frequency_penalty;
    p.num_logprobs = options.logprobs;
    std::vector<int32_t> context = prompt;
    context.insert(context.end(), generated.begin(), generated.end());
    ref::SampledLogprobs got_logprobs;
    ASSERT_EQ(ref::sample_row(logits, p, context, int64_t(prompt.size()), &got_logprobs), want)
        << "trial " << trial;
    if (options.logprobs >= 0) {
      EXPECT_EQ(got_logprobs.logprob, engine_logprobs.logprob);
      EXPECT_EQ(got_logprobs.top, engine_logprobs.top) << "trial " << trial;
    }
  }
}

// draw_token's distribution from its definition, in double: stable order, top_k, top_p prefix,
// min_p, renormalised.
std::vector<double> draw_token_distribution(const std::vector<float>& logits, float temperature,
                                            int top_k, float top_p, float min_p) {
  const int vocab = int(logits.size());
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  int keep = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::vector<double> prob(keep);
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    prob[i] = std::exp((double(logits[order[i]]) - logits[order[0]]) / temperature);
    total += prob[i];
  }
  double mass = 0.0;
  for (int i = 0; i < keep; ++i) {
    mass += prob[i] / total;
    if (mass >= top_p) {
      keep = i + 1;
      break;
    }
  }
  while (keep > 1 && prob[keep - 1] < min_p * prob[0]) --keep;
  std::vector<double> distribution(vocab, 0.0);
  double kept = 0.0;
  for (int i = 0; i < keep; ++i) kept += prob[i];
  for (int i = 0; i < keep; ++i) distribution[order[i]] = prob[i] / kept;
  return distribution;
}

double chi_square(const std::vector<int>& counts, const std::vector<double>& expected, int draws,
                  int* impossible) {
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0.0) {
      *impossible += counts[i];
      continue;
    }
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(SamplingRef, DrawHasDrawTokensDistribution) {
  // Ties (1.0 three times, 0.25 twice) and a -inf; top_p values away from any prefix boundary.
  const std::vector<float> logits = {1.0f,  0.25f, 2.0f,  1.0f,  -kInf, 0.25f,
                                     -0.5f, 1.0f,  -1.5f, 0.75f, 1.75f};
  struct Case {
    float temperature, top_p, min_p;
    int top_k;
  };
  const Case cases[] = {{1.0f, 1.0f, 0.0f, 0}, {0.7f, 1.0f, 0.0f, 4},   {1.3f, 0.83f, 0.0f, 0},
                        {1.0f, 1.0f, 0.3f, 0}, {0.9f, 0.91f, 0.05f, 6}, {2.0f, 0.5f, 0.0f, 5},
                        {1.0f, 1.0f, 0.0f, 3}, {0.5f, 0.97f, 0.0f, 0}};
  constexpr int kDraws = 20000;
  // Chi-square critical value for <= 10 degrees of freedom at p = 1e-6 is about 47.
  constexpr double kMaxChiSquare = 47.0;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "T " << c.temperature << " top_k " << c.top_k << " top_p "
                                    << c.top_p << " min_p " << c.min_p);
    const std::vector<double> want =
        draw_token_distribution(logits, c.temperature, c.top_k, c.top_p, c.min_p);
    SamplingRowParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.seed = 12345;
    const std::vector<double> twin = ref::sample_row_distribution(logits, p, {}, 0);
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(twin[i], want[i], 2e-6) << "token " << i;
      EXPECT_EQ(twin[i] == 0.0, want[i] == 0.0) << "token " << i << ": support differs";
    }
    std::vector<int> twin_counts(logits.size(), 0), cpu_counts(logits.size(), 0);
    std::mt19937_64 rng(p.seed);
    for (int step = 0; step < kDraws; ++step) {
      p.step = uint64_t(step);
      ++twin_counts[ref::sample_row(logits, p, {}, 0, nullptr)];
      ++cpu_counts[model::draw_token(logits.data(), int(logits.size()), c.temperature, c.top_k,
                                     c.top_p, c.min_p, rng)];
    }
    int impossible = 0;
    EXPECT_LT(chi_square(twin_counts, want, kDraws, &impossible), kMaxChiSquare);
    EXPECT_LT(chi_square(cpu_counts, want, kDraws, &impossible), kMaxChiSquare);
    EXPECT_EQ(impossible, 0);
  }
}

TEST(SamplingRef, SameSeedAndStepSameTokenOtherStepsVary) {
  std::vector<float> logits(1000);
  std::mt19937 rng(5);
  for (float& x : logits) x = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  SamplingRowParams p;
  p.seed = 99;
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 64; ++step) {
    p.step = step;
    const int32_t token = ref::sample_row(logits, p, {}, 0, nullptr);
    EXPECT_EQ(ref::sample_row(logits, p, {}, 0, nullptr), token);
    seen.insert(token);
  }
  EXPECT_GT(seen.size(), 30u);  // near-flat over 1000 tokens: 64 draws rarely repeat
  p.step = 3;
  std::set<int32_t> by_seed;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    p.seed = seed;
    by_seed.insert(ref::sample_row(logits, p, {}, 0, nullptr));
  }
  EXPECT_GT(by_seed.size(), 30u);
}

}  // namespace
}  // namespace mla
