// StepLog (engine/metrics.h): the ring keeps the newest records, oldest first; StepRecord's kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "engine/metrics.h"

namespace mla {
namespace {

TEST(StepLog, KeepsTheNewestInOrder) {
  engine::StepLog log(3);
  EXPECT_TRUE(log.snapshot().empty());
  for (int i = 1; i <= 5; ++i) {
    engine::StepRecord record;
    record.num_tokens = i;
    log.record(record);
  }
  const std::vector<engine::StepRecord> records = log.snapshot();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].num_tokens, 3);
  EXPECT_EQ(records[1].num_tokens, 4);
  EXPECT_EQ(records[2].num_tokens, 5);
  log.clear();
  EXPECT_TRUE(log.snapshot().empty());
}

TEST(StepLog, DecodeOnly) {
  engine::StepRecord record;
  EXPECT_FALSE(record.decode_only());  // an empty step is neither
  record.num_tokens = 4;
  record.num_decode_tokens = 4;
  EXPECT_TRUE(record.decode_only());
  record.num_tokens = 5;
  EXPECT_FALSE(record.decode_only());
}

// LatencySpread against the exact mean, median and p99 of the same values (odd and even
// counts, values past the 10-s bins included), added from several threads.
TEST(LatencySpread, MatchesTheExactSpreadWithinHalfABin) {
  for (const size_t n : {1u, 2u, 1001u, 40000u}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::lognormal_distribution<double> gap(std::log(0.015), 0.8);  // ~15 ms, a long tail
    std::vector<double> values(n);
    for (double& v : values) v = gap(rng);
    if (n > 2) values[n / 3] = 12.5;  // past the bins
    engine::LatencySpread spread;
    std::vector<std::thread> threads;
    for (size_t t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (size_t i = t; i < n; i += 4) spread.add(values[i]);
      });
    for (std::thread& thread : threads) thread.join();
    const engine::LatencySpread::Summary s = spread.summary();

    std::sort(values.begin(), values.end());
    double sum = 0;
    for (double v : values) sum += v;
    const double median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    const double p99 = values[std::max<size_t>(static_cast<size_t>(std::ceil(0.99 * n)), 1) - 1];
    const double half_bin = engine::LatencySpread::kBinSeconds / 2 + 1e-12;
    EXPECT_EQ(s.count, n);
    EXPECT_NEAR(s.mean, sum / n, 1e-9 * n);
    EXPECT_NEAR(s.median, median, half_bin) << n;
    EXPECT_NEAR(s.p99, p99, p99 >= 10.0 ? 1e-12 : half_bin) << n;
  }
  engine::LatencySpread empty;
  EXPECT_EQ(empty.summary().count, 0u);
  engine::LatencySpread over;  // only values past the bins: exact
  over.add(11.0);
  over.add(13.0);
  EXPECT_DOUBLE_EQ(over.summary().median, 12.0);
  EXPECT_DOUBLE_EQ(over.summary().p99, 13.0);
}

}  // namespace
}  // namespace mla
