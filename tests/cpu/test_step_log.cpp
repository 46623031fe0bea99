// StepLog (engine/metrics.h): the ring keeps the newest records, oldest first; StepRecord's kind.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mla
