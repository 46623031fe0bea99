// The decode plan (pure host logic, the same functions the device plan kernel and the decode
// kernel run): every page of every sequence is covered exactly once, no part is overloaded, split
// indices are unique and contiguous per sequence, and no block-table entry past a sequence's last
// page is ever touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
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

// The sequence-aligned plan's T for these page counts, worked out here by brute force: the smallest
// T ≥ 1 with Σ ceil(n / T) ≤ num_parts (and ≤ max_pieces when that is not 0), taken only when T is
// at most the balanced share, every sequence with pages can have a part, and no minimum cost is
// asked for; 0 otherwise.
int expected_aligned_pages(const std::vector<int>& pages, int num_parts, int balanced_share,
                           int min_cost_per_part, int64_t max_pieces) {
  int busy = 0;
  for (int n : pages) busy += n > 0 ? 1 : 0;
  if (min_cost_per_part > 1 || busy == 0 || busy > num_parts) return 0;
  for (int t = 1; t <= balanced_share; ++t) {
    int64_t needed = 0;
    for (int n : pages) needed += (n + t - 1) / t;
    if (needed <= num_parts && (max_pieces == 0 || needed <= max_pieces)) return t;
  }
  return 0;
}

PlanCheck check_plan(const std::vector<int32_t>& seqlens, int num_parts, int max_pages_per_seq,
                     int min_cost_per_part = 0, bool sequence_aligned = true,
                     int rows_per_tile = 16) {
  const int batch = static_cast<int>(seqlens.size());
  const std::vector<int32_t> data =
      make_decode_plan_host(seqlens.data(), batch, num_parts, max_pages_per_seq, min_cost_per_part,
                            sequence_aligned, rows_per_tile);
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
  int max_part_pages = 0;
  int max_part_pieces = 0;
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
    max_part_pages = std::max(max_part_pages, static_cast<int>(walked.size()));
    max_part_pieces = std::max(max_part_pieces, position);
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
    EXPECT_EQ(record.page_offset, plan.page_offset());
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
  // The plan is sequence-aligned exactly when that plan fits in no more pages per part than the
  // balanced share (worked out independently above).
  const int share = cost_per_part(total_cost, num_parts, min_cost_per_part, max_seq_cost);
  const int balanced = std::max({(total_cost + num_parts - 1) / num_parts, min_cost_per_part, 1});
  // Tiles of more than 16 rows: no more pieces than the balanced plan (checked on its own above
  // when check_plan runs with sequence_aligned false).
  int64_t max_pieces = 0;
  if (rows_per_tile > 16) {
    const std::vector<int32_t> balanced_plan = make_decode_plan_host(
        seqlens.data(), batch, num_parts, max_pages_per_seq, min_cost_per_part, false);
    max_pieces = DecodePlanView(balanced_plan.data(), batch, num_parts).total_splits();
  }
  const int aligned = sequence_aligned ? expected_aligned_pages(pages, num_parts, share,
                                                                min_cost_per_part, max_pieces)
                                       : 0;
  EXPECT_EQ(plan.sequence_aligned(), aligned > 0) << "share " << share << ", aligned " << aligned;
  if (aligned > 0) {
    // One piece a part, of at most T pages, T = ceil(n / pieces) for each sequence's pieces.
    EXPECT_EQ(plan.cost_per_part(), aligned);
    EXPECT_EQ(plan.page_offset(), 0);
    EXPECT_LE(max_part_pieces, 1);
    EXPECT_LE(max_part_pages, aligned);
    EXPECT_LE(max_part_pages, share);
    for (int b = 0; b < batch; ++b)
      EXPECT_EQ(plan.num_splits(b), (pages[b] + aligned - 1) / aligned);
    return result;
  }
  // The balanced plan: no part costs more than its share plus one fixed overhead, and the share is
  // the balanced one or a whole multiple of the costliest sequence at most the slack above it.
  EXPECT_EQ(plan.page_offset(), kDecodeFixedCostPages);
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
// sequences, no splits (nothing for the combine to merge); far below it: the balanced share. With
// the sequence-aligned plan off, so this is the balanced plan's rule alone.
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
    const PlanCheck check = check_plan(seqlens, c.num_parts, 1024, 0, false);
    const std::vector<int32_t> data =
        make_decode_plan_host(seqlens.data(), c.batch, c.num_parts, 1024, 0, false);
    EXPECT_EQ(DecodePlanView(data.data(), c.batch, c.num_parts).cost_per_part(), c.expected_share);
    if (c.whole)
      EXPECT_EQ(check.total_pieces, c.batch);
    else
      EXPECT_GT(check.total_pieces, c.batch);
  }
}

// Equal lengths with at least as many parts as sequences: the sequence-aligned plan, each sequence
// in ceil(n / T) pieces of one part each, where it puts no more pages on a part than the balanced
// plan; the balanced plan where it would (b = 128 at 32k: 512 pages a part against 502), where the
// sequences outnumber the parts, and when it is turned off.
TEST(DecodePlan, EqualLengthsTakeTheSequenceAlignedPlan) {
  struct Case {
    int batch, seqlen, num_parts, rows_per_tile;
    int expected_pages_per_part;  // 0: the balanced plan
    int expected_splits_per_seq;
  };
  for (const Case& c : {Case{32, 4096, 66, 64, 32, 2},      // b = 32, 128 rows a kv head: C = 34
                        Case{32, 8192, 66, 64, 64, 2},      // C = 65
                        Case{32, 4096, 132, 16, 16, 4},     // b = 32, 16 rows: C = 17
                        Case{32, 1024, 132, 16, 4, 4},      // C = 6
                        Case{8, 1024, 132, 16, 1, 16},      // C = 2
                        Case{8, 1024, 132, 64, 2, 8},       // 68 balanced pieces: T = 1 makes 128
                        Case{8, 1024, 66, 64, 3, 6},        // 48 balanced pieces
                        Case{1, 8192, 132, 64, 2, 64},      // 65 balanced pieces
                        Case{8, 4096, 132, 16, 4, 16},      // C = 5
                        Case{1, 32768, 132, 16, 4, 128},    // C = 4
                        Case{128, 4096, 132, 16, 64, 1},    // whole sequences, as the balanced rule
                        Case{32, 32768, 132, 16, 0, 0},     // T = 128 > C = 126
                        Case{128, 32768, 132, 16, 0, 0},    // T = 512 > C = 502
                        Case{200, 1024, 132, 16, 0, 0}}) {  // more sequences than parts
    SCOPED_TRACE(testing::Message() << "batch " << c.batch << ", seqlen " << c.seqlen << ", parts "
                                    << c.num_parts << ", rows per tile " << c.rows_per_tile);
    const std::vector<int32_t> seqlens(c.batch, c.seqlen);
    check_plan(seqlens, c.num_parts, 1024, 0, true, c.rows_per_tile);
    check_plan(seqlens, c.num_parts, 1024, 0, false);
    const std::vector<int32_t> data =
        make_decode_plan_host(seqlens.data(), c.batch, c.num_parts, 1024, 0, true, c.rows_per_tile);
    const DecodePlanView plan{data.data(), c.batch, c.num_parts};
    EXPECT_EQ(plan.sequence_aligned(), c.expected_pages_per_part > 0);
    if (c.expected_pages_per_part > 0) {
      EXPECT_EQ(plan.cost_per_part(), c.expected_pages_per_part);
      for (int b = 0; b < c.batch; ++b) EXPECT_EQ(plan.num_splits(b), c.expected_splits_per_seq);
    }
    const std::vector<int32_t> off =
        make_decode_plan_host(seqlens.data(), c.batch, c.num_parts, 1024, 0, false);
    EXPECT_FALSE(DecodePlanView(off.data(), c.batch, c.num_parts).sequence_aligned());
  }
}

// Ragged lengths: sequence-aligned when few enough sequences share the parts (each piece at most T
// pages), balanced when a long tail of short sequences would leave parts idle.
TEST(DecodePlan, RaggedLengthsTakeTheSequenceAlignedPlanWhenItFits) {
  const std::vector<int32_t> few = {700, 1, 2900, 64, 65, 0, 1300};
  check_plan(few, 66, 64);
  const std::vector<int32_t> data = make_decode_plan_host(few.data(), 7, 66, 64);
  const DecodePlanView plan{data.data(), 7, 66};
  ASSERT_TRUE(plan.sequence_aligned());
  EXPECT_EQ(plan.num_splits(5), 0);  // the empty sequence
  EXPECT_EQ(plan.num_splits(1), 1);
  std::mt19937 rng(44);
  std::vector<int32_t> many(128);
  for (int32_t& len : many) len = std::uniform_int_distribution<int>(1, 8192)(rng);
  check_plan(many, 132, 128);
  EXPECT_FALSE(DecodePlanView(make_decode_plan_host(many.data(), 128, 132, 128).data(), 128, 132)
                   .sequence_aligned());
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
    check_plan(seqlens, num_parts, (max_len + 63) / 64, 0, false);
    check_plan(seqlens, num_parts, (max_len + 63) / 64, 0, true, 64);
  }
}

TEST(DecodePlan, MinCostPerPartMakesFewerLongerPieces) {
  // min 0 and 1 are the same plan, word for word (balanced, and sequence-aligned when allowed).
  std::vector<int32_t> seqlens = {4096};
  EXPECT_EQ(make_decode_plan_host(seqlens.data(), 1, 132, 64, 0, false),
            make_decode_plan_host(seqlens.data(), 1, 132, 64, 1, false));
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
  // Above the balanced share the minimum changes nothing (a minimum turns the sequence-aligned
  // plan off).
  std::vector<int32_t> many(128, 4096);
  EXPECT_EQ(make_decode_plan_host(many.data(), 128, 132, 64, 0, false),
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

}  // namespace
}  // namespace mla::kernels
