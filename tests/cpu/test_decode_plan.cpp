// The decode plan (pure host logic, the same functions the device plan kernel and the decode
// kernel run): every page of every sequence is covered exactly once, no part is overloaded, split
// indices are unique and contiguous per sequence, and no block-table entry past a sequence's last
// page is ever touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mla/kernels/mla_decode_plan.h"

namespace mla::kernels {
namespace {

// Every page of every sequence has an owner, and each sequence's split indices are exactly
// [split_begin, split_begin + num_splits).
void expect_covered_and_dense(const DecodePlanView& plan, const std::vector<int>& pages,
                              const std::vector<std::vector<int>>& page_owner,
                              std::map<int, std::set<int>>& splits_of_seq) {
  for (int b = 0; b < static_cast<int>(pages.size()); ++b) {
    for (int j = 0; j < pages[b]; ++j)
      EXPECT_NE(page_owner[b][j], -1) << "page " << j << " of seq " << b << " not covered";
    const auto& splits = splits_of_seq[b];
    EXPECT_EQ(static_cast<int>(splits.size()), plan.num_splits(b));
    if (!splits.empty()) {
      EXPECT_EQ(*splits.begin(), plan.split_begin()[b]);
      EXPECT_EQ(*splits.rbegin(), plan.split_begin()[b] + plan.num_splits(b) - 1);
    }
  }
}

struct PlanCheck {
  int max_part_cost = 0;
  int total_pieces = 0;
};

PlanCheck check_plan(const std::vector<int32_t>& seqlens, int num_parts, int max_pages_per_seq,
                     int min_cost_per_part = 0) {
  const int batch = static_cast<int>(seqlens.size());
  const std::vector<int32_t> data =
      make_decode_plan_host(seqlens.data(), batch, num_parts, max_pages_per_seq, min_cost_per_part);
  EXPECT_EQ(static_cast<int64_t>(data.size()), decode_plan_ints(batch, num_parts));
  const DecodePlanView plan{data.data(), batch, num_parts};
  EXPECT_EQ(data[2], batch);
  EXPECT_EQ(data[3], num_parts);

  std::vector<std::vector<int>> page_owner(batch);  // part covering each page, -1 = none
  std::vector<int> pages(batch);
  int total_cost = 0;
  int max_seq_cost = 0;
  for (int b = 0; b < batch; ++b) {
    pages[b] = num_pages_of(clamp_seqlen(seqlens[b], max_pages_per_seq));
    page_owner[b].assign(pages[b], -1);
    total_cost += seq_cost(pages[b]);
    max_seq_cost = std::max(max_seq_cost, seq_cost(pages[b]));
  }
  std::map<int, std::set<int>> splits_of_seq;
  std::set<int> all_splits;
  PlanCheck result;
  for (int part = 0; part < num_parts; ++part) {
    PartPieceCursor cursor(plan, seqlens.data(), max_pages_per_seq, part);
    DecodePiece piece;
    const bool has_work = cursor.first(&piece);
    // The kernels' look-ahead walks the same pages in the same order, pieces one after another.
    PartPageStream stream(cursor, has_work, piece);
    std::vector<std::pair<int, int>> streamed, walked;
    for (int seq, page; stream.next(&seq, &page);) streamed.emplace_back(seq, page);
    int cost = 0;
    int previous_seq = -1;
    std::vector<int> split_piece_positions;  // the fused combine holds at most two, first and last
    int position = 0;
    for (bool more = has_work; more; more = cursor.next(&piece), ++position) {
      if (piece.num_splits > 1) split_piece_positions.push_back(position);
      for (int j = piece.page_begin; j < piece.page_end; ++j) walked.emplace_back(piece.seq, j);
      ++result.total_pieces;
      EXPECT_GT(piece.seq, previous_seq) << "pieces of a part are in sequence order";
      previous_seq = piece.seq;
      EXPECT_LT(piece.page_begin, piece.page_end);
      EXPECT_GE(piece.page_begin, 0);
      // Never past the last page of the sequence (so never a block-table entry it does not own).
      EXPECT_LE(piece.page_end, pages[piece.seq]);
      EXPECT_LE(piece.page_end, max_pages_per_seq);
      for (int j = piece.page_begin; j < piece.page_end; ++j) {
        EXPECT_EQ(page_owner[piece.seq][j], -1)
            << "page " << j << " of seq " << piece.seq << " covered twice";
        page_owner[piece.seq][j] = part;
      }
      EXPECT_EQ(piece.num_splits, plan.num_splits(piece.seq));
      EXPECT_TRUE(all_splits.insert(piece.split_index).second) << "split index reused";
      splits_of_seq[piece.seq].insert(piece.split_index);
      cost += piece.page_end - piece.page_begin + kDecodeFixedCostPages;
    }
    result.max_part_cost = std::max(result.max_part_cost, cost);
    EXPECT_LE(split_piece_positions.size(), 2u) << "part " << part;
    for (int split_position : split_piece_positions)
      EXPECT_TRUE(split_position == 0 || split_position == position - 1)
          << "part " << part << ": a split piece in the middle of the part";
    EXPECT_EQ(streamed, walked) << "part " << part << ": the page stream is not the pieces' pages";
    // The part's record (its first piece, read by the kernels) against a scan from
    // part_first_seq: the same pieces, in the same order.
    PartPieceCursor scan = PartPieceCursor::scanning(plan, seqlens.data(), max_pages_per_seq, part);
    std::vector<std::pair<int, int>> scanned;
    DecodePiece scanned_piece;
    std::vector<int> scanned_splits;
    while (scan.next(&scanned_piece)) {
      for (int j = scanned_piece.page_begin; j < scanned_piece.page_end; ++j)
        scanned.emplace_back(scanned_piece.seq, j);
      scanned_splits.push_back(scanned_piece.split_index);
    }
    EXPECT_EQ(scanned, walked) << "part " << part << ": its record disagrees with the scan";
    const DecodePartRecord& record = plan.part_records()[part];
    EXPECT_EQ(record.cost_per_part, plan.cost_per_part());
    if (scanned.empty()) {
      EXPECT_EQ(record.seq, -1) << "part " << part << " has no work";
    } else {
      EXPECT_EQ(record.seq, scanned.front().first);
      EXPECT_EQ(record.page_begin, scanned.front().second);
      EXPECT_EQ(record.split_index, scanned_splits.front());
    }
  }
  expect_covered_and_dense(plan, pages, page_owner, splits_of_seq);
  EXPECT_EQ(plan.total_splits(), result.total_pieces);
  // The workspace holds batch + num_parts partial results; a plan never needs more.
  EXPECT_LE(plan.total_splits(), batch + num_parts - 1);
  // Balance: no part costs more than its share plus one fixed overhead, and the share is the
  // balanced one or a whole multiple of the costliest sequence at most the slack above it.
  const int share = cost_per_part(total_cost, num_parts, min_cost_per_part, max_seq_cost);
  const int balanced = std::max({(total_cost + num_parts - 1) / num_parts, min_cost_per_part, 1});
  EXPECT_EQ(plan.cost_per_part(), share);
  EXPECT_TRUE(share == balanced || (share % max_seq_cost == 0 && share > balanced &&
                                    share <= balanced + kDecodeNoSplitSlackPages))
      << "share " << share << ", balanced " << balanced << ", costliest sequence " << max_seq_cost;
  EXPECT_GE(share, std::max(min_cost_per_part, 1));
  EXPECT_LE(result.max_part_cost, share + kDecodeFixedCostPages);
  // A piece holds at least a part's worth of pages except at a sequence's two ends.
  for (int b = 0; b < batch; ++b) {
    if (pages[b] > 0) {
      EXPECT_LE(plan.num_splits(b), (pages[b] + share - 1) / share + 1);
    }
  }
  return result;
}

TEST(DecodePlan, UniformBatchSplitsEvenly) {
  std::vector<int32_t> seqlens(128, 4096);
  const PlanCheck check = check_plan(seqlens, 132, 64);
  EXPECT_LE(check.max_part_cost,
            (128 * (64 + kDecodeFixedCostPages) + 131) / 132 + kDecodeFixedCostPages);
}

// Equal lengths whose balanced share is just below a whole number of sequences per part: whole
// sequences, no splits (nothing for the combine to merge); far below it: the balanced share.
TEST(DecodePlan, EqualLengthsNearTheSmCountAreNotSplit) {
  struct Case {
    int batch, seqlen, num_parts, expected_share;
    bool whole;
  };
  const int f = kDecodeFixedCostPages;
  for (const Case& c :
       {Case{128, 4096, 132, 64 + f, true}, Case{128, 2048, 132, 32 + f, true},
        Case{256, 2048, 132, 2 * (32 + f), true}, Case{132, 4096, 132, 64 + f, true},
        Case{128, 32768, 132, (128 * (512 + f) + 131) / 132, false},
        Case{64, 4096, 132, (64 * (64 + f) + 131) / 132, false}}) {
    SCOPED_TRACE(testing::Message() << "batch " << c.batch << ", seqlen " << c.seqlen);
    const std::vector<int32_t> seqlens(c.batch, c.seqlen);
    const PlanCheck check = check_plan(seqlens, c.num_parts, 1024);
    const std::vector<int32_t> data =
        make_decode_plan_host(seqlens.data(), c.batch, c.num_parts, 1024);
    EXPECT_EQ(DecodePlanView(data.data(), c.batch, c.num_parts).cost_per_part(), c.expected_share);
    if (c.whole)
      EXPECT_EQ(check.total_pieces, c.batch);
    else
      EXPECT_GT(check.total_pieces, c.batch);
  }
}

TEST(DecodePlan, SingleLongSequenceIsSplitAcrossAllParts) {
  std::vector<int32_t> seqlens = {131072};
  const std::vector<int32_t> data = make_decode_plan_host(seqlens.data(), 1, 132, 2048);
  const DecodePlanView plan{data.data(), 1, 132};
  EXPECT_GE(plan.num_splits(0), 100);
  check_plan(seqlens, 132, 2048);
}

TEST(DecodePlan, ZeroLengthsAndUnalignedLengths) {
  check_plan({0, 1, 63, 64, 65, 0, 127, 128, 129, 0}, 7, 3);
  check_plan({0, 0, 0}, 132, 1);
  check_plan({0}, 1, 1);
}

TEST(DecodePlan, LengthsBeyondTheBlockTableAreClamped) {
  // 1000 tokens need 16 pages but the table has 4 columns: only 4 pages may be read.
  check_plan({1000, -5, 200}, 3, 4);
}

TEST(DecodePlan, OneLongSequenceAmongShortOnes) {
  std::vector<int32_t> seqlens(63, 17);
  seqlens.insert(seqlens.begin() + 20, 50000);
  check_plan(seqlens, 132, 800);
}

TEST(DecodePlan, RandomRaggedBatches) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int batch = std::uniform_int_distribution<int>(1, 300)(rng);
    const int max_len = std::uniform_int_distribution<int>(1, 20000)(rng);
    const int num_parts = std::uniform_int_distribution<int>(1, 140)(rng);
    std::vector<int32_t> seqlens(batch);
    for (int32_t& len : seqlens) len = std::uniform_int_distribution<int>(0, max_len)(rng);
    check_plan(seqlens, num_parts, (max_len + 63) / 64);
  }
}

TEST(DecodePlan, MinCostPerPartMakesFewerLongerPieces) {
  // min 0 and 1 are the balanced plan, word for word.
  std::vector<int32_t> seqlens = {4096};
  EXPECT_EQ(make_decode_plan_host(seqlens.data(), 1, 132, 64, 0),
            make_decode_plan_host(seqlens.data(), 1, 132, 64, 1));
  // b = 1, s_k = 4096: 64 one-page pieces balanced; with 8 pages per part, 9 pieces (units 5..68
  // over parts of 8 units: parts 0..8), the other parts empty.
  EXPECT_EQ(DecodePlanView(make_decode_plan_host(seqlens.data(), 1, 132, 64, 0).data(), 1, 132)
                .num_splits(0),
            64);
  const std::vector<int32_t> coarse = make_decode_plan_host(seqlens.data(), 1, 132, 64, 8);
  EXPECT_EQ(DecodePlanView(coarse.data(), 1, 132).cost_per_part(), 8);
  EXPECT_EQ(DecodePlanView(coarse.data(), 1, 132).num_splits(0), 9);
  check_plan(seqlens, 132, 64, 8);
  // Above the balanced share the minimum changes nothing.
  std::vector<int32_t> many(128, 4096);
  EXPECT_EQ(make_decode_plan_host(many.data(), 128, 132, 64, 0),
            make_decode_plan_host(many.data(), 128, 132, 64, 60));
  check_plan({131072}, 132, 2048, 16);
  check_plan({0, 0, 0}, 132, 1, 7);
  check_plan({1000, -5, 200}, 3, 4, 100);
}

TEST(DecodePlan, RandomRaggedBatchesWithMinCostPerPart) {
  std::mt19937 rng(43);
  for (int trial = 0; trial < 300; ++trial) {
    const int batch = std::uniform_int_distribution<int>(1, 40)(rng);
    const int max_len = std::uniform_int_distribution<int>(1, 40000)(rng);
    const int num_parts = std::uniform_int_distribution<int>(1, 140)(rng);
    const int min_cost = std::uniform_int_distribution<int>(0, 64)(rng);
    std::vector<int32_t> seqlens(batch);
    for (int32_t& len : seqlens) len = std::uniform_int_distribution<int>(0, max_len)(rng);
    check_plan(seqlens, num_parts, (max_len + 63) / 64, min_cost);
  }
}

TEST(DecodePlan, LaunchShapeTilesEveryRow) {
  for (int s_q = 1; s_q <= 4; ++s_q) {
    for (int h_q = 1; h_q <= 128; ++h_q) {
      const DecodeLaunchShape shape = decode_launch_shape(s_q, h_q, 1, 132);
      EXPECT_EQ(shape.rows_per_kv_head, s_q * h_q);
      EXPECT_GE(shape.num_row_tiles * shape.rows_per_tile, shape.rows_per_kv_head);
      EXPECT_LT((shape.num_row_tiles - 1) * shape.rows_per_tile, shape.rows_per_kv_head);
      EXPECT_GE(shape.num_parts, 1);
      EXPECT_LE(shape.num_parts * shape.num_row_tiles, 132);
    }
  }
  EXPECT_EQ(decode_launch_shape(1, 16, 1, 132).rows_per_tile, 16);
  EXPECT_EQ(decode_launch_shape(1, 32, 1, 132).rows_per_tile, 32);
  EXPECT_EQ(decode_launch_shape(2, 128, 1, 132).num_row_tiles, 4);
  EXPECT_EQ(decode_launch_shape(2, 128, 1, 132).num_parts, 33);
}

// A weighted plan (make_decode_weighted_plan_host): every page in exactly one piece, each
// sequence's split indices dense, each part walked from its record the way a kernel would
// (WeightedPartPieceCursor), pieces inside their part's units, and shares in proportion to the
// weights.
void check_weighted_plan(const std::vector<int32_t>& seqlens, const std::vector<int32_t>& weights,
                         int max_pages_per_seq) {
  const int batch = static_cast<int>(seqlens.size());
  const int num_parts = static_cast<int>(weights.size());
  const std::vector<int32_t> data = make_decode_weighted_plan_host(
      seqlens.data(), batch, weights.data(), num_parts, max_pages_per_seq);
  ASSERT_EQ(static_cast<int64_t>(data.size()), decode_plan_ints(batch, num_parts));
  const DecodePlanView plan{data.data(), batch, num_parts};
  EXPECT_EQ(data[2], batch);
  EXPECT_EQ(data[3], num_parts);
  std::vector<std::vector<int>> page_owner(batch);
  std::vector<int> pages(batch);
  int total_cost = 0;
  for (int b = 0; b < batch; ++b) {
    pages[b] = num_pages_of(clamp_seqlen(seqlens[b], max_pages_per_seq));
    page_owner[b].assign(pages[b], -1);
    total_cost += seq_cost(pages[b]);
  }
  int64_t weight_total = 0;
  for (int32_t w : weights) weight_total += std::max(w, 0);
  std::map<int, std::set<int>> splits_of_seq;
  std::set<int> all_splits;
  int total_pieces = 0, largest = 0, expected_begin = 0;
  int64_t weight_prefix = 0;
  for (int part = 0; part < num_parts; ++part) {
    const DecodePartRecord& record = plan.part_records()[part];
    // The share: U_p = floor(total · W_p / W), exactly; and within one unit of the proportion.
    EXPECT_EQ(record.first_unit, expected_begin) << "part " << part;
    weight_prefix += std::max(weights[part], 0);
    const int end = part + 1 == num_parts
                        ? total_cost
                        : static_cast<int>(total_cost * weight_prefix / weight_total);
    EXPECT_EQ(record.cost_per_part, end - expected_begin) << "part " << part;
    EXPECT_NEAR(record.cost_per_part,
                double(total_cost) * std::max(weights[part], 0) / double(weight_total), 1.0 + 1e-9)
        << "part " << part;
    largest = std::max(largest, record.cost_per_part);
    WeightedPartPieceCursor cursor(plan, seqlens.data(), max_pages_per_seq, part);
    DecodePiece piece;
    int previous_seq = -1;
    for (bool more = cursor.first(&piece); more; more = cursor.next(&piece)) {
      EXPECT_GT(piece.seq, previous_seq);
      previous_seq = piece.seq;
      EXPECT_LT(piece.page_begin, piece.page_end);
      EXPECT_LE(piece.page_end, pages[piece.seq]);
      EXPECT_EQ(piece.num_splits, plan.num_splits(piece.seq));
      EXPECT_EQ(piece.seqlen, clamp_seqlen(seqlens[piece.seq], max_pages_per_seq));
      // Inside the part's units.
      const int first = first_page_unit(plan.cost_begin()[piece.seq]);
      EXPECT_GE(first + piece.page_begin, expected_begin);
      EXPECT_LE(first + piece.page_end, end);
      for (int j = piece.page_begin; j < piece.page_end; ++j) {
        EXPECT_EQ(page_owner[piece.seq][j], -1)
            << "page " << j << " of seq " << piece.seq << " covered twice";
        page_owner[piece.seq][j] = part;
      }
      EXPECT_TRUE(all_splits.insert(piece.split_index).second) << "split index reused";
      splits_of_seq[piece.seq].insert(piece.split_index);
      ++total_pieces;
    }
    expected_begin = end;
  }
  EXPECT_EQ(plan.cost_per_part(), largest);
  expect_covered_and_dense(plan, pages, page_owner, splits_of_seq);
  EXPECT_EQ(plan.total_splits(), total_pieces);
  EXPECT_LE(plan.total_splits(), batch + num_parts - 1);
}

TEST(DecodeWeightedPlan, SharesFollowTheWeights) {
  // b = 128 at 4k / 32k on 132 parts: uniform, and SMs 20 % apart.
  for (int len : {4096, 32768}) {
    const std::vector<int32_t> seqlens(128, len);
    check_weighted_plan(seqlens, std::vector<int32_t>(132, 1000), len / 64);
    std::vector<int32_t> weights(132);
    for (int i = 0; i < 132; ++i) weights[i] = 800 + (i * 37) % 201;
    check_weighted_plan(seqlens, weights, len / 64);
  }
  // Weights of 0 (parts with no units), one part with everything, tiny totals.
  check_weighted_plan({4096, 100, 0, 7000}, {0, 5, 0, 0, 7, 1, 0}, 128);
  check_weighted_plan({4096, 100, 0, 7000}, {0, 0, 1, 0}, 128);
  check_weighted_plan({1}, std::vector<int32_t>(132, 3), 16);
  check_weighted_plan({0, 0}, std::vector<int32_t>(8, 1), 16);
  check_weighted_plan({100000, 50}, {1, 2, 3, 4}, 32);  // the first length is clamped
}

TEST(DecodeWeightedPlan, RandomBatchesAndWeights) {
  std::mt19937 rng(19);
  for (int trial = 0; trial < 200; ++trial) {
    const int batch = std::uniform_int_distribution<int>(1, 200)(rng);
    const int num_parts = std::uniform_int_distribution<int>(1, 140)(rng);
    const int max_len = std::uniform_int_distribution<int>(1, 20000)(rng);
    std::vector<int32_t> seqlens(batch);
    for (int32_t& len : seqlens) len = std::uniform_int_distribution<int>(0, max_len)(rng);
    std::vector<int32_t> weights(num_parts);
    for (int32_t& w : weights)
      w = std::uniform_int_distribution<int>(trial % 3 == 0 ? 0 : 1, 1000)(rng);
    if (std::all_of(weights.begin(), weights.end(), [](int32_t w) { return w == 0; }))
      weights[0] = 1;
    check_weighted_plan(seqlens, weights, (max_len + 63) / 64);
  }
}

// A weighted plan in which no weight is positive is the plan in which every part weighs 1.
TEST(DecodeWeightedPlan, NoPositiveWeightMeansEveryPartWeighsOne) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 60; ++trial) {
    const int batch = std::uniform_int_distribution<int>(1, 150)(rng);
    const int num_parts = std::uniform_int_distribution<int>(1, 140)(rng);
    const int max_len = std::uniform_int_distribution<int>(1, 20000)(rng);
    std::vector<int32_t> seqlens(batch);
    for (int32_t& len : seqlens) len = std::uniform_int_distribution<int>(0, max_len)(rng);
    const int max_pages = (max_len + 63) / 64;
    const std::vector<int32_t> ones(num_parts, 1);
    const std::vector<int32_t> want =
        make_decode_weighted_plan_host(seqlens.data(), batch, ones.data(), num_parts, max_pages);
    std::vector<int32_t> zeros(num_parts, 0), negative(num_parts), mixed(num_parts);
    for (int32_t& w : negative) w = -std::uniform_int_distribution<int>(1, 1000000)(rng);
    for (int part = 0; part < num_parts; ++part) mixed[part] = part % 2 == 0 ? 0 : negative[part];
    if (num_parts > 1) negative[num_parts - 1] = INT32_MIN;
    for (const auto& [name, weights] :
         {std::pair{"zeros", &zeros}, std::pair{"negative", &negative}, std::pair{"mixed", &mixed}})
      EXPECT_EQ(make_decode_weighted_plan_host(seqlens.data(), batch, weights->data(), num_parts,
                                               max_pages),
                want)
          << name << ", trial " << trial << ", batch " << batch << ", parts " << num_parts;
  }
}

// The SM → part table built the obvious way: the slots with a positive weight in %smid order,
// then the others in order; the p-th slot of that order holds part p (p < num_parts), every other
// slot -1; a part weighs its slot's weight, or 0 for a slot without a positive one.
struct ExpectedSmTable {
  std::vector<int32_t> part_of_slot;
  std::vector<int32_t> part_weights;
};
ExpectedSmTable expected_sm_table(const std::vector<int32_t>& sm_weights, int num_parts) {
  std::vector<int> order;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot)
    if (sm_weights[slot] > 0) order.push_back(slot);
  for (int slot = 0; slot < kDecodeSmSlots; ++slot)
    if (sm_weights[slot] <= 0) order.push_back(slot);
  ExpectedSmTable table;
  table.part_of_slot.assign(kDecodeSmSlots, -1);
  table.part_weights.assign(num_parts, 0);
  for (int part = 0; part < num_parts && part < kDecodeSmSlots; ++part) {
    table.part_of_slot[order[part]] = part;
    table.part_weights[part] = std::max(sm_weights[order[part]], 0);
  }
  return table;
}

void check_sm_table(const std::vector<int32_t>& sm_weights, int num_parts,
                    const std::string& label) {
  SCOPED_TRACE(label);
  ASSERT_EQ(static_cast<int>(sm_weights.size()), kDecodeSmSlots);
  ASSERT_LE(num_parts, kDecodeSmSlots);
  std::vector<int32_t> part_weights = {-7};  // replaced, not appended to
  const std::vector<int32_t> table =
      make_decode_sm_part_table_host(sm_weights.data(), num_parts, &part_weights);
  const ExpectedSmTable want = expected_sm_table(sm_weights, num_parts);
  EXPECT_EQ(table, want.part_of_slot);
  EXPECT_EQ(part_weights, want.part_weights);
  // Every part in exactly one slot; the other slots empty.
  ASSERT_EQ(static_cast<int>(table.size()), kDecodeSmSlots);
  std::vector<int> slots_of_part(num_parts, 0);
  for (int32_t part : table) {
    if (part < 0) {
      EXPECT_EQ(part, -1);
      continue;
    }
    ASSERT_LT(part, num_parts);
    ++slots_of_part[part];
  }
  for (int part = 0; part < num_parts; ++part) EXPECT_EQ(slots_of_part[part], 1) << "part " << part;
  EXPECT_EQ(std::count(table.begin(), table.end(), -1), kDecodeSmSlots - num_parts);
  // The weighted slots hold parts 0, 1, 2... in %smid order.
  int next_weighted_part = 0;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot) {
    if (sm_weights[slot] <= 0) continue;
    EXPECT_EQ(table[slot], next_weighted_part < num_parts ? next_weighted_part : -1)
        << "weighted slot " << slot;
    ++next_weighted_part;
  }
}

TEST(DecodeSmBalancedPlan, TableGivesEveryPartOneSlot) {
  std::mt19937 rng(77);
  auto weights_on = [&](int begin, int end, int low, int high) {
    std::vector<int32_t> weights(kDecodeSmSlots, 0);
    for (int slot = begin; slot < end; ++slot)
      weights[slot] = std::uniform_int_distribution<int>(low, high)(rng);
    return weights;
  };
  const std::vector<int32_t> device = weights_on(0, 132, 800, 1000);
  check_sm_table(device, 132, "132 weighted SMs, 132 parts");
  check_sm_table(device, 100, "132 weighted SMs, 100 parts: the extra weighted slots get -1");
  check_sm_table(device, 200, "132 weighted SMs, 200 parts: 68 unweighted slots take the rest");
  check_sm_table(device, 1, "one part");
  std::vector<int32_t> holes = device;
  for (int slot : {0, 5, 17, 64, 131}) holes[slot] = 0;
  holes[40] = -5;
  holes[90] = INT32_MIN;
  check_sm_table(holes, 132, "a few zeros and negative weights: unweighted");
  check_sm_table(std::vector<int32_t>(kDecodeSmSlots, 0), 132, "all zero");
  check_sm_table(std::vector<int32_t>(kDecodeSmSlots, 0), 1, "all zero, one part");
  check_sm_table(std::vector<int32_t>(kDecodeSmSlots, -3), 77, "all negative");
  check_sm_table(weights_on(200, 256, 1, 1000), 132, "only slots 200..255 weighted");
  check_sm_table(weights_on(200, 256, 1, 1000), 40, "only slots 200..255 weighted, 40 parts");
  check_sm_table(std::vector<int32_t>(kDecodeSmSlots, INT32_MAX), 132, "INT32_MAX everywhere");
  check_sm_table(weights_on(0, 256, 1, 5), 256, "every slot weighted, 256 parts");
  check_sm_table(weights_on(0, 256, 1, 5), 1, "every slot weighted, one part");
  std::vector<int32_t> last_only(kDecodeSmSlots, 0);
  last_only[255] = 9;
  check_sm_table(last_only, 1, "only slot 255 weighted, one part");
  check_sm_table(last_only, 256, "only slot 255 weighted, 256 parts");
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> weights(kDecodeSmSlots);
    const int zero_percent = std::uniform_int_distribution<int>(0, 100)(rng);
    for (int32_t& w : weights) {
      const int kind = std::uniform_int_distribution<int>(0, 99)(rng);
      w = kind < zero_percent ? (kind % 3 == 0 ? -std::uniform_int_distribution<int>(1, 9)(rng) : 0)
                              : std::uniform_int_distribution<int>(1, 1000)(rng);
    }
    const int num_parts = std::uniform_int_distribution<int>(1, kDecodeSmSlots)(rng);
    check_sm_table(weights, num_parts, "random, trial " + std::to_string(trial));
  }
}

// make_decode_sm_balanced_plan_host(): the weighted plan over the table's part weights (the
// weights the table gives each part, built here the obvious way), and the table itself.
TEST(DecodeSmBalancedPlan, IsTheWeightedPlanOverTheTable) {
  std::mt19937 rng(78);
  for (int trial = 0; trial < 150; ++trial) {
    const int batch = std::uniform_int_distribution<int>(1, 300)(rng);
    const int num_parts = std::uniform_int_distribution<int>(1, kDecodeSmSlots)(rng);
    const int max_len = std::uniform_int_distribution<int>(1, 20000)(rng);
    std::vector<int32_t> seqlens(batch);
    for (int32_t& len : seqlens) len = std::uniform_int_distribution<int>(-5, max_len)(rng);
    seqlens[0] = max_len + 100;  // clamped
    const int max_pages = (max_len + 63) / 64;
    std::vector<int32_t> sm_weights(kDecodeSmSlots, 0);
    const int pattern = trial % 5;
    for (int slot = 0; slot < kDecodeSmSlots; ++slot) {
      int32_t w = 0;
      if (pattern == 0 && slot < 132) w = std::uniform_int_distribution<int>(800, 1000)(rng);
      if (pattern == 1 && slot < 132 && slot % 7 != 0)
        w = std::uniform_int_distribution<int>(800, 1000)(rng);
      if (pattern == 3 && slot >= 200) w = std::uniform_int_distribution<int>(1, 1000)(rng);
      if (pattern == 4) w = std::uniform_int_distribution<int>(-1000, 1000)(rng);
      sm_weights[slot] = w;  // pattern 2: all zero
    }
    const ExpectedSmTable want_table = expected_sm_table(sm_weights, num_parts);
    std::vector<int32_t> part_of_slot = {1, 2, 3};
    const std::vector<int32_t> plan = make_decode_sm_balanced_plan_host(
        seqlens.data(), batch, sm_weights.data(), num_parts, max_pages, &part_of_slot);
    EXPECT_EQ(part_of_slot, want_table.part_of_slot) << "trial " << trial;
    EXPECT_EQ(plan,
              make_decode_weighted_plan_host(seqlens.data(), batch, want_table.part_weights.data(),
                                             num_parts, max_pages))
        << "trial " << trial << ", pattern " << pattern;
    // And that plan is a valid weighted plan (every page once, dense splits, shares by weight).
    if (std::any_of(want_table.part_weights.begin(), want_table.part_weights.end(),
                    [](int32_t w) { return w > 0; }))
      check_weighted_plan(seqlens, want_table.part_weights, max_pages);
  }
}

// WeightedPartPieceCursor (the balanced body's) walks a usual plan exactly like PartPieceCursor:
// the same pieces of every part, and the same page stream for the kernels' look-ahead.
void expect_cursors_agree(const std::vector<int32_t>& seqlens, int num_parts, int max_pages,
                          int min_cost_per_part) {
  const int batch = static_cast<int>(seqlens.size());
  const std::vector<int32_t> data =
      make_decode_plan_host(seqlens.data(), batch, num_parts, max_pages, min_cost_per_part);
  const DecodePlanView plan{data.data(), batch, num_parts};
  auto tuple_of = [](const DecodePiece& piece) {
    return std::vector<int>{piece.seq,      piece.seqlen,      piece.page_begin,
                            piece.page_end, piece.split_index, piece.num_splits};
  };
  for (int part = 0; part < num_parts; ++part) {
    SCOPED_TRACE(testing::Message()
                 << "batch " << batch << ", parts " << num_parts << ", max pages " << max_pages
                 << ", min cost " << min_cost_per_part << ", part " << part);
    // The usual plan's records hold p · C as their first unit.
    EXPECT_EQ(plan.part_records()[part].first_unit, part * plan.cost_per_part());
    PartPieceCursor usual(plan, seqlens.data(), max_pages, part);
    WeightedPartPieceCursor weighted(plan, seqlens.data(), max_pages, part);
    DecodePiece usual_piece, weighted_piece;
    const bool usual_has = usual.first(&usual_piece);
    const bool weighted_has = weighted.first(&weighted_piece);
    ASSERT_EQ(usual_has, weighted_has);
    PartPageStream usual_stream(usual, usual_has, usual_piece);
    PartPageStreamOf<WeightedPartPieceCursor> weighted_stream(weighted, weighted_has,
                                                              weighted_piece);
    std::vector<std::vector<int>> usual_pieces, weighted_pieces;
    for (bool more = usual_has; more; more = usual.next(&usual_piece))
      usual_pieces.push_back(tuple_of(usual_piece));
    for (bool more = weighted_has; more; more = weighted.next(&weighted_piece))
      weighted_pieces.push_back(tuple_of(weighted_piece));
    EXPECT_EQ(weighted_pieces, usual_pieces);
    std::vector<std::pair<int, int>> usual_pages, weighted_pages;
    for (int seq, page; usual_stream.next(&seq, &page);) usual_pages.emplace_back(seq, page);
    for (int seq, page; weighted_stream.next(&seq, &page);) weighted_pages.emplace_back(seq, page);
    EXPECT_EQ(weighted_pages, usual_pages);
    int pages_in_pieces = 0;
    for (const auto& piece : usual_pieces) pages_in_pieces += piece[3] - piece[2];
    EXPECT_EQ(static_cast<int>(usual_pages.size()), pages_in_pieces);
  }
}

TEST(DecodePlan, WeightedCursorWalksTheUsualPlan) {
  expect_cursors_agree(std::vector<int32_t>(128, 4096), 132, 64, 0);
  expect_cursors_agree({131072}, 132, 2048, 0);
  expect_cursors_agree({131072}, 132, 2048, 16);
  expect_cursors_agree({0, 1, 63, 64, 65, 0, 127, 128, 129, 0}, 7, 3, 0);
  expect_cursors_agree({1000, -5, 200}, 3, 4, 100);
  expect_cursors_agree({0, 0, 0}, 132, 1, 0);
  std::mt19937 rng(44);
  for (int trial = 0; trial < 300; ++trial) {
    const int batch = std::uniform_int_distribution<int>(1, 300)(rng);
    const int max_len = std::uniform_int_distribution<int>(1, 20000)(rng);
    const int num_parts = std::uniform_int_distribution<int>(1, 132)(rng);
    const int min_cost = trial % 2 == 0 ? 0 : std::uniform_int_distribution<int>(1, 64)(rng);
    // Ragged (0 included, some negative), and some lengths past the block table's capacity.
    const int max_pages = std::max(1, (max_len + 63) / 64 - (trial % 3 == 0 ? 3 : 0));
    std::vector<int32_t> seqlens(batch);
    for (int32_t& len : seqlens) len = std::uniform_int_distribution<int>(-3, max_len)(rng);
    if (trial % 4 == 0)
      for (int32_t& len : seqlens) len = std::max(len, 0) % 3 == 0 ? 0 : len;
    expect_cursors_agree(seqlens, num_parts, max_pages, min_cost);
  }
}

// The ranked table (MlaDecodeSmBalance::kRanked) built the obvious way: the slots with a positive
// weight sorted by weight, the heaviest first (ties: the lower slot first), then the others in
// slot order; the p-th slot of that order holds part p.
std::vector<int32_t> expected_ranked_table(const std::vector<int32_t>& sm_weights, int num_parts) {
  std::vector<int> weighted, others;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot)
    (sm_weights[slot] > 0 ? weighted : others).push_back(slot);
  std::stable_sort(weighted.begin(), weighted.end(),
                   [&](int a, int b) { return sm_weights[a] > sm_weights[b]; });
  weighted.insert(weighted.end(), others.begin(), others.end());
  std::vector<int32_t> table(kDecodeSmSlots, -1);
  for (int part = 0; part < num_parts && part < kDecodeSmSlots; ++part)
    table[weighted[part]] = part;
  return table;
}

TEST(DecodeSmBalancedPlan, RankedTableOrdersThePartsByWeight) {
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> weight(-50, 1000);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> sm_weights(kDecodeSmSlots, 0);
    const int sms = 1 + trial % 200;
    for (int slot = 0; slot < sms; ++slot) sm_weights[slot] = weight(rng) / (trial % 3 + 1);
    if (trial % 7 == 0) sm_weights[255] = INT32_MAX;
    for (int num_parts : {1, 7, 132, 256}) {
      const std::vector<int32_t> table =
          make_decode_sm_ranked_table_host(sm_weights.data(), num_parts);
      EXPECT_EQ(table, expected_ranked_table(sm_weights, num_parts))
          << "trial " << trial << ", parts " << num_parts;
      // Every part in exactly one slot, and a heavier slot never holds a later part.
      std::vector<int> slots_of_part(num_parts, 0);
      for (int32_t part : table)
        if (part >= 0) ++slots_of_part[part];
      EXPECT_EQ(std::count(slots_of_part.begin(), slots_of_part.end(), 1), num_parts);
      for (int a = 0; a < kDecodeSmSlots; ++a) {
        for (int b = 0; b < kDecodeSmSlots; ++b) {
          if (table[a] >= 0 && table[b] >= 0 && sm_weights[a] > 0 &&
              sm_weights[a] > sm_weights[b]) {
            EXPECT_LT(table[a], table[b]) << "slots " << a << ", " << b;
          }
        }
      }
    }
  }
  // No weight: the same as the shares' table (slot order).
  const std::vector<int32_t> none(kDecodeSmSlots, 0);
  std::vector<int32_t> part_weights;
  EXPECT_EQ(make_decode_sm_ranked_table_host(none.data(), 132),
            make_decode_sm_part_table_host(none.data(), 132, &part_weights));
}

TEST(DecodeSmBalancedPlan, AppliesToOneGridRowOf16RowTiles) {
  EXPECT_TRUE(decode_sm_balance_applies(decode_launch_shape(1, 16, 1, 132), 1));
  EXPECT_TRUE(decode_sm_balance_applies(decode_launch_shape(1, 8, 1, 132), 1));
  EXPECT_TRUE(decode_sm_balance_applies(decode_launch_shape(1, 1, 1, 132), 1));
  EXPECT_TRUE(decode_sm_balance_applies(decode_launch_shape(2, 8, 1, 132), 1));   // 16 rows
  EXPECT_TRUE(decode_sm_balance_applies(decode_launch_shape(1, 16, 1, 256), 1));  // 256 parts
  for (int heads : {32, 64, 128})
    EXPECT_FALSE(decode_sm_balance_applies(decode_launch_shape(1, heads, 1, 132), 1)) << heads;
  EXPECT_FALSE(decode_sm_balance_applies(decode_launch_shape(2, 16, 1, 132), 1));  // 32 rows
  // h_kv 2 with 16 rows per kv head: two grid rows.
  EXPECT_FALSE(decode_sm_balance_applies(decode_launch_shape(1, 32, 2, 132), 2));
  // More parts than the table has slots.
  EXPECT_FALSE(decode_sm_balance_applies(decode_launch_shape(1, 16, 1, 300), 1));
  EXPECT_FALSE(decode_sm_balance_applies(decode_launch_shape(1, 16, 1, 257), 1));
}

}  // namespace
}  // namespace mla::kernels
