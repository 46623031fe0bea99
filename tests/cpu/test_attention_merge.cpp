// LSE merge of partial attention results: splitting the keys anywhere and merging gives the
// attention over all keys; empty parts (lse = ±inf) are neutral.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ref/attention_merge.h"

namespace mla {
namespace {

// Attention of one query over keys [begin, end) with scalar values (dimension `dim`).
void attend(const std::vector<double>& scores, const std::vector<std::vector<float>>& values,
            int begin, int end, std::vector<float>& out, float& lse) {
  const int dim = static_cast<int>(values[0].size());
  out.assign(dim, 0.f);
  if (begin >= end) {
    lse = -INFINITY;
    return;
  }
  double max_score = -INFINITY;
  for (int j = begin; j < end; ++j) max_score = std::max(max_score, scores[j]);
  double sum = 0;
  std::vector<double> acc(dim, 0.0);
  for (int j = begin; j < end; ++j) {
    const double w = std::exp(scores[j] - max_score);
    sum += w;
    for (int d = 0; d < dim; ++d) acc[d] += w * values[j][d];
  }
  for (int d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d] / sum);
  lse = static_cast<float>(max_score + std::log(sum));
}

TEST(AttentionMerge, SplitAnywhereThenMergeEqualsWhole) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 3.0);
  const int n = 50, dim = 8;
  std::vector<double> scores(n);
  std::vector<std::vector<float>> values(n, std::vector<float>(dim));
  for (int j = 0; j < n; ++j) {
    scores[j] = normal(rng);
    for (float& v : values[j]) v = static_cast<float>(normal(rng));
  }
  std::vector<float> whole;
  float whole_lse;
  attend(scores, values, 0, n, whole, whole_lse);
  for (int split : {0, 1, 17, 49, 50}) {
    std::vector<float> a, b;
    float lse_a, lse_b;
    attend(scores, values, 0, split, a, lse_a);
    attend(scores, values, split, n, b, lse_b);
    ref::merge_attention_partial(a.data(), &lse_a, b.data(), lse_b, dim);
    EXPECT_NEAR(lse_a, whole_lse, 1e-5) << "split " << split;
    for (int d = 0; d < dim; ++d) EXPECT_NEAR(a[d], whole[d], 1e-5) << "split " << split;
  }
}

TEST(AttentionMerge, EmptyPartsWithEitherInfinityAreNeutral) {
  std::vector<float> a = {1.f, 2.f};
  float lse_a = 0.5f;
  const std::vector<float> nan_values = {NAN, NAN};
  ref::merge_attention_partial(a.data(), &lse_a, nan_values.data(), INFINITY, 2);
  EXPECT_EQ(a[0], 1.f);
  EXPECT_EQ(a[1], 2.f);
  EXPECT_FLOAT_EQ(lse_a, 0.5f);
  std::vector<float> empty = {NAN, NAN};
  float lse_empty = -INFINITY;
  ref::merge_attention_partial(empty.data(), &lse_empty, nan_values.data(), INFINITY, 2);
  EXPECT_EQ(empty[0], 0.f);
  EXPECT_TRUE(std::isinf(lse_empty) && lse_empty < 0);
}

}  // namespace
}  // namespace mla
