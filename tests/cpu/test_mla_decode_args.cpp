// Boundary validation of the MLA decode op (host only, no GPU needed): each bad argument is
// rejected with a message naming it, the expected and the actual value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>

#include "core/error.h"
#include "mla/kernels/mla_decode.h"

namespace mla::kernels {
namespace {

// Fake device addresses: validation never dereferences them.
template <typename T>
T* fake_pointer(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

DecodeDeviceFacts hopper() {
  return {9, 0, 132};
}

MlaDecodeParams valid_params() {
  MlaDecodeParams p;
  p.batch = 4;
  p.seqlen_q = 2;
  p.num_heads_q = 16;
  p.num_heads_kv = 1;
  p.num_pages = 100;
  p.max_pages_per_seq = 20;
  p.softmax_scale = 0.1147f;
  p.causal = true;
  p.q = fake_pointer<const bf16>(0x10000);
  p.kv_cache = fake_pointer<const bf16>(0x20000);
  p.block_table = fake_pointer<const int32_t>(0x30000);
  p.seqlens = fake_pointer<const int32_t>(0x40000);
  p.out = fake_pointer<bf16>(0x50000);
  p.lse = fake_pointer<float>(0x60000);
  p.num_sms = 132;
  p.workspace = fake_pointer<void>(0x70000);
  p.workspace_bytes = mla_decode_workspace_size(4, 2, 16, 1, 132);
  p.set_contiguous_strides();
  return p;
}

void expect_rejected(const std::function<void(MlaDecodeParams&)>& mutate,
                     const std::string& expected_text, const DecodeDeviceFacts& device = hopper()) {
  MlaDecodeParams p = valid_params();
  mutate(p);
  try {
    check_mla_decode_args(p, device);
    FAIL() << "expected an error mentioning \"" << expected_text << "\"";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(expected_text), std::string::npos)
        << "message: " << error.what();
  }
}

TEST(MlaDecodeArgs, ValidParamsPass) {
  EXPECT_NO_THROW(check_mla_decode_args(valid_params(), hopper()));
}

TEST(MlaDecodeArgs, HeadDimsAndPageSize) {
  expect_rejected([](auto& p) { p.head_dim_qk = 192; },
                  "head_dim_qk must be 576 (kv_lora_rank 512 + rope 64), got 192");
  expect_rejected([](auto& p) { p.head_dim_v = 128; },
                  "head_dim_v must be 512 (kv_lora_rank), got 128");
  expect_rejected([](auto& p) { p.page_size = 16; }, "page_size must be 64 tokens, got 16");
}

TEST(MlaDecodeArgs, HeadCounts) {
  expect_rejected([](auto& p) { p.num_heads_q = 0; }, "num_heads_q must be a positive multiple");
  expect_rejected([](auto& p) { p.num_heads_q = 129; },
                  "num_heads_q / num_heads_kv must be in [1, 128], got 129 / 1 = 129");
  expect_rejected([](auto& p) { p.num_heads_kv = 3; }, "h_q = 16, h_kv = 3");
  expect_rejected([](auto& p) { p.seqlen_q = 0; }, "seqlen_q (s_q) must be in [1, 128], got 0");
}

TEST(MlaDecodeArgs, NullAndMisalignedPointers) {
  expect_rejected([](auto& p) { p.q = nullptr; }, "q is null");
  expect_rejected([](auto& p) { p.kv_cache = nullptr; }, "kv_cache is null");
  expect_rejected([](auto& p) { p.block_table = nullptr; }, "block_table is null");
  expect_rejected([](auto& p) { p.seqlens = nullptr; }, "seqlens is null");
  expect_rejected([](auto& p) { p.out = nullptr; }, "out is null");
  expect_rejected([](auto& p) { p.lse = nullptr; }, "lse is null");
  expect_rejected([](auto& p) { p.workspace = nullptr; }, "workspace is null");
  expect_rejected([](auto& p) { p.q = fake_pointer<const bf16>(0x10002); },
                  "q must be 16-byte aligned");
  expect_rejected([](auto& p) { p.kv_cache = fake_pointer<const bf16>(0x20008); },
                  "kv_cache must be 16-byte aligned");
  expect_rejected([](auto& p) { p.out = fake_pointer<bf16>(0x50004); },
                  "out must be 16-byte aligned");
  expect_rejected([](auto& p) { p.workspace = fake_pointer<void>(0x70080); },
                  "workspace must be 256-byte aligned");
}

TEST(MlaDecodeArgs, Strides) {
  expect_rejected([](auto& p) { p.q_head_stride = 580; },
                  "q_head_stride must be a multiple of 8 elements");
  expect_rejected(
      [](auto& p) { p.kv_token_stride = 100; },
      "kv_token_stride must be a multiple of 8 elements (16 bytes) and >= 576, got 100");
  expect_rejected([](auto& p) { p.block_table_batch_stride = 3; },
                  "block_table_batch_stride must be >= max_pages_per_seq (20), got 3");
}

TEST(MlaDecodeArgs, WorkspaceTooSmall) {
  expect_rejected([](auto& p) { p.workspace_bytes -= 1; }, "workspace has");
  // A workspace sized for a smaller batch is too small for this one.
  expect_rejected([](auto& p) { p.workspace_bytes = mla_decode_workspace_size(1, 2, 16, 1, 132); },
                  "needs");
}

TEST(MlaDecodeArgs, ScaleAndDevice) {
  expect_rejected([](auto& p) { p.softmax_scale = 0.f; }, "softmax_scale must be finite and > 0");
  expect_rejected([](auto& p) {},
                  "needs an sm_90 GPU (H100/H200; the kernels are built for sm_90a), found sm_80",
                  DecodeDeviceFacts{8, 0, 108});
  expect_rejected([](auto& p) {}, "found sm_100", DecodeDeviceFacts{10, 0, 148});
}

TEST(MlaDecodeArgs, WorkspaceGrowsWithTheProblem) {
  const size_t small = mla_decode_workspace_size(8, 1, 16, 1, 132);
  EXPECT_GT(mla_decode_workspace_size(128, 1, 16, 1, 132), small);
  EXPECT_GT(mla_decode_workspace_size(8, 2, 128, 1, 132), small);
  const DecodeWorkspaceLayout layout = decode_workspace_layout(8, 1, 16, 1, 132);
  EXPECT_EQ(layout.max_splits, 8 + 132);
  EXPECT_EQ(layout.partial_out_offset % 256, 0u);
  EXPECT_EQ(layout.total_bytes, layout.partial_out_offset + size_t(140) * 16 * 512 * 4);
}

TEST(MlaDecodeArgs, SmallBatchRule) {
  // 16-row tiles, 132 parts: split at least 4 ways with at most 512 rows.
  EXPECT_TRUE(decode_batch_is_small(1, 1, 16, 1, 132));
  EXPECT_TRUE(decode_batch_is_small(8, 1, 16, 1, 132));
  EXPECT_TRUE(decode_batch_is_small(32, 1, 16, 1, 132));   // 132 ≥ 4 · 32, 512 rows
  EXPECT_FALSE(decode_batch_is_small(33, 1, 16, 1, 132));  // 132 < 4 · 33
  EXPECT_FALSE(decode_batch_is_small(128, 1, 16, 1, 132));
  // 64-row tiles: h_q = 64 at b = 8 is 512 rows in one tile per sequence (132 parts).
  EXPECT_TRUE(decode_batch_is_small(8, 1, 64, 1, 132));
  EXPECT_FALSE(decode_batch_is_small(8, 1, 128, 1, 132));  // 1024 rows
  // h_q = 128, s_q = 2: 256 rows per sequence in 64-row tiles (four tiles, 33 parts).
  EXPECT_TRUE(decode_batch_is_small(1, 2, 128, 1, 132));
  EXPECT_TRUE(decode_batch_is_small(2, 2, 128, 1, 132));   // 512 rows
  EXPECT_FALSE(decode_batch_is_small(4, 2, 128, 1, 132));  // 1024 rows
  EXPECT_FALSE(decode_batch_is_small(32, 2, 128, 1, 132));
  EXPECT_TRUE(decode_batch_is_small(1, 1, 16, 1, 4));   // 4 parts: splits 4 ways
  EXPECT_FALSE(decode_batch_is_small(1, 1, 16, 1, 3));  // 3 parts: nothing splits 4 ways
  EXPECT_FALSE(decode_batch_is_small(0, 1, 16, 1, 132));
  // The thresholds given.
  EXPECT_FALSE(decode_batch_is_small(8, 1, 16, 1, 132, 17));
  EXPECT_FALSE(decode_batch_is_small(8, 1, 16, 1, 132, 4, 127));
}

// Whether the environment overrides the combine's small-batch thresholds
// (decode_combine_is_sliced() reads them once per process; ctest sets neither,
// scripts/gpu/decode-latency.sh may).
bool combine_thresholds_from_environment() {
  for (const char* name :
       {"MLA_DECODE_SMALL_BATCH_MAX_ROWS", "MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

TEST(MlaDecodeArgs, SlicedCombineRule) {
  if (combine_thresholds_from_environment())
    GTEST_SKIP() << "MLA_DECODE_SMALL_BATCH_* set: the default thresholds are not in force";
  // Split as a small batch, with up to kSlicedCombineMaxRows (1024) rows: b = 8 with 128 rows per
  // kv head is not a small batch (its schedule stays the pairs order) but its combine is sliced.
  EXPECT_EQ(kSlicedCombineMaxRows, 1024);
  EXPECT_TRUE(decode_combine_is_sliced(8, 1, 128, 1, 132, kSlicedCombineMaxRows));   // 1024 rows
  EXPECT_TRUE(decode_combine_is_sliced(8, 2, 64, 1, 132, kSlicedCombineMaxRows));    // 1024 rows
  EXPECT_FALSE(decode_combine_is_sliced(8, 2, 128, 1, 132, kSlicedCombineMaxRows));  // 2048 rows
  EXPECT_TRUE(decode_combine_is_sliced(32, 1, 16, 1, 132, kSlicedCombineMaxRows));
  EXPECT_TRUE(decode_combine_is_sliced(33, 1, 16, 1, 132, kSlicedCombineMaxRows));   // 528 rows
  EXPECT_FALSE(decode_combine_is_sliced(34, 1, 16, 1, 132, kSlicedCombineMaxRows));  // 132 < 4 · 34
  EXPECT_FALSE(decode_combine_is_sliced(128, 1, 16, 1, 132, kSlicedCombineMaxRows));
  EXPECT_TRUE(decode_combine_is_sliced(8, 1, 128, 1, 132, 1024));
  EXPECT_FALSE(decode_combine_is_sliced(8, 1, 128, 1, 132, 512));
  // Without a limit given: kSlicedCombineMaxRows.
  EXPECT_TRUE(decode_combine_is_sliced(8, 1, 128, 1, 132));
  EXPECT_FALSE(decode_combine_is_sliced(8, 2, 128, 1, 132));
}

TEST(MlaDecodeArgs, ResolvedCombine) {
  // kAuto's resolution reads MLA_DECODE_COMBINE once per process; these expectations are the
  // defaults, so they only hold without it.
  const char* forced = std::getenv("MLA_DECODE_COMBINE");
  if (forced != nullptr && *forced != '\0' && std::string(forced) != "auto")
    GTEST_SKIP() << "MLA_DECODE_COMBINE=" << forced << " overrides kAuto in this process";
  MlaDecodeParams p;
  p.batch = 1;
  p.seqlen_q = 1;
  p.num_heads_q = 16;
  p.num_sms = 132;
  p.max_pages_per_seq = 16;
  EXPECT_EQ(resolved_decode_combine(p), MlaDecodeCombine::kLaunched);  // kBaseline: always
  p.kernel = MlaDecodeKernel::kFast;
  EXPECT_EQ(resolved_decode_combine(p), MlaDecodeCombine::kLaunched);  // kAuto: launched
  p.batch = 128;
  EXPECT_EQ(resolved_decode_combine(p), MlaDecodeCombine::kLaunched);
  p.combine = MlaDecodeCombine::kFused;  // forced either way
  EXPECT_EQ(resolved_decode_combine(p), MlaDecodeCombine::kFused);
  p.batch = 1;
  p.combine = MlaDecodeCombine::kLaunched;
  EXPECT_EQ(resolved_decode_combine(p), MlaDecodeCombine::kLaunched);
  EXPECT_STREQ(to_string(MlaDecodeCombine::kFused), "fused");
}

TEST(MlaDecodeArgs, ResolvedSchedule) {
  MlaDecodeParams p;
  p.seqlen_q = 1;
  p.num_heads_q = 128;
  p.schedule = MlaDecodeSchedule::kSeesaw;
  EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kLockstep);  // kBaseline: always
  p.kernel = MlaDecodeKernel::kFast;
  // kSeesaw by the rows per kv head: S first from 128 rows (two or more 64-row tiles).
  EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawSFirst);
  p.num_heads_q = 64;
  EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawPvFirst);
  p.seqlen_q = 2;  // 128 rows
  EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawSFirst);
  p.num_heads_q = 128;
  p.num_heads_kv = 2;  // 128 rows per kv head
  EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawSFirst);
  p.num_heads_kv = 4;  // 64
  EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawPvFirst);
  for (MlaDecodeSchedule forced :
       {MlaDecodeSchedule::kLockstep, MlaDecodeSchedule::kSeesawSFirst,
        MlaDecodeSchedule::kSeesawPvFirst, MlaDecodeSchedule::kSeesawPairs}) {
    p.schedule = forced;
    EXPECT_EQ(resolved_decode_schedule(p), forced);
  }
  // kAuto: kSeesawPairs (measured faster), but P·V first for small batches (short pieces),
  // unless MLA_DECODE_SEESAW says otherwise (read once per process; ctest leaves it unset).
  p.schedule = MlaDecodeSchedule::kAuto;
  const char* env = std::getenv("MLA_DECODE_SEESAW");
  if (env == nullptr || *env == '\0') {
    EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawPairs);  // no num_sms
    p.num_sms = 132;
    p.batch = 128;  // 128 · 128 rows: not small
    EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawPairs);
    p.batch = 1;  // one sequence split over the SMs: small
    ASSERT_TRUE(decode_batch_is_small(p.batch, p.seqlen_q, p.num_heads_q, p.num_heads_kv, 132));
    EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawPvFirst);
    p.num_sms = 0;
  } else if (std::string(env) == "0") {
    EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kLockstep);
  } else if (std::string(env) == "1") {
    EXPECT_EQ(resolved_decode_schedule(p), MlaDecodeSchedule::kSeesawPvFirst);  // 64 rows
  }
  EXPECT_STREQ(to_string(MlaDecodeSchedule::kSeesaw), "seesaw");
  EXPECT_STREQ(to_string(MlaDecodeSchedule::kLockstep), "lockstep");
  EXPECT_STREQ(to_string(MlaDecodeSchedule::kSeesawPvFirst), "seesaw_pv_first");
  EXPECT_STREQ(to_string(MlaDecodeSchedule::kSeesawPairs), "seesaw_pairs");
}

// Which launches the diagnostics record (explicit schedules and combines, so the environment's
// switches do not enter): the timeline, kFast's 16-row body with either combine and the seesaw's
// pairs or P·V-first order with the launched one; the pair trace, the pairs order with the
// launched combine only.
TEST(MlaDecodeArgs, WhichLaunchesTheDiagnosticsRecord) {
  struct Case {
    MlaDecodeKernel kernel;
    int heads;
    MlaDecodeSchedule schedule;
    MlaDecodeCombine combine;
    bool timeline, pair_trace;
  };
  using K = MlaDecodeKernel;
  using S = MlaDecodeSchedule;
  using C = MlaDecodeCombine;
  const Case cases[] = {
      {K::kBaseline, 128, S::kSeesawPairs, C::kLaunched, false, false},
      {K::kFast, 8, S::kSeesawPairs, C::kFused, true, false},  // 16 rows: the 16-row body
      {K::kFast, 8, S::kSeesawPairs, C::kLaunched, true, false},
      {K::kFast, 128, S::kSeesawPairs, C::kLaunched, true, true},
      {K::kFast, 128, S::kSeesawPvFirst, C::kLaunched, true, false},
      {K::kFast, 128, S::kSeesawSFirst, C::kLaunched, false, false},
      {K::kFast, 128, S::kLockstep, C::kLaunched, false, false},
      {K::kFast, 128, S::kSeesawPairs, C::kFused, false, false},
  };
  for (const Case& c : cases) {
    MlaDecodeParams p = valid_params();  // s_q = 2
    p.kernel = c.kernel;
    p.num_heads_q = c.heads;
    p.schedule = c.schedule;
    p.combine = c.combine;
    EXPECT_EQ(decode_timeline_applies(p), c.timeline)
        << to_string(c.kernel) << " h_q " << c.heads << " " << to_string(c.schedule) << " "
        << to_string(c.combine);
    EXPECT_EQ(decode_pair_trace_applies(p), c.pair_trace)
        << to_string(c.kernel) << " h_q " << c.heads << " " << to_string(c.schedule) << " "
        << to_string(c.combine);
  }
}

// The pair trace holds kDecodePairTraceWords per CTA of the grid (the timeline's CTA count), and a
// negative piece is refused before anything runs.
TEST(MlaDecodeArgs, PairTraceSizeAndPiece) {
  MlaDecodeParams p = valid_params();  // s_q = 2
  p.kernel = MlaDecodeKernel::kFast;
  p.num_heads_q = 128;
  p.schedule = MlaDecodeSchedule::kSeesawPairs;
  p.combine = MlaDecodeCombine::kLaunched;
  for (int sms : {1, 8, 132}) {
    p.num_sms = sms;
    const int64_t ctas = decode_timeline_split_ctas(p);
    EXPECT_GE(ctas, 1);
    EXPECT_EQ(decode_pair_trace_words(p), ctas * kDecodePairTraceWords) << "num_sms " << sms;
  }
  uint64_t word = 0;  // refused for the piece number, before anything touches a device
  try {
    launch_mla_decode_with_pair_trace(p, &word, nullptr, -1);
    ADD_FAILURE() << "a negative piece number was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("negative"), std::string::npos) << e.what();
  }
}

// The timeline's words: the split CTAs' stamps and SM words, then the launched combine's CTAs
// (the sliced combine's rows × slices where decode_combine_is_sliced(); otherwise one warp per row,
// 8 rows a CTA, in one wave: the batch's row blocks, at most 4 CTAs an SM, the one-wave kernel's
// occupancy at 64 registers a thread).
TEST(MlaDecodeArgs, TimelineWordsCoverTheCombine) {
  if (combine_thresholds_from_environment())
    GTEST_SKIP() << "MLA_DECODE_SMALL_BATCH_* set: the default thresholds are not in force";
  MlaDecodeParams p = valid_params();  // s_q = 2
  p.kernel = MlaDecodeKernel::kFast;
  p.num_heads_q = 128;
  p.combine = MlaDecodeCombine::kLaunched;
  for (int batch : {1, 3, 200}) {
    p.batch = batch;
    const int64_t split = decode_timeline_split_ctas(p);
    const int64_t combine = decode_timeline_combine_ctas(p);
    const int64_t rows = int64_t(p.seqlen_q) * p.num_heads_q;  // h_kv · rows per kv head
    const int64_t row_blocks = batch * ((rows + 7) / 8);
    const bool sliced = decode_combine_is_sliced(batch, p.seqlen_q, p.num_heads_q, p.num_heads_kv,
                                                 p.num_sms, kSlicedCombineMaxRows);
    EXPECT_EQ(sliced, batch <= 3) << "batch " << batch;  // 3 · 256 rows ≤ 1024: sliced
    if (sliced) {
      EXPECT_GE(combine, batch * rows);
      EXPECT_LE(combine, batch * rows * 8);
    } else {
      EXPECT_EQ(combine, std::min<int64_t>(row_blocks, 4 * p.num_sms)) << "batch " << batch;
    }
    EXPECT_EQ(mla_decode_timeline_words(p),
              split * (2 * kDecodeTimelineSlots + 1) + combine * kDecodeCombineTimelineSlots);
    EXPECT_EQ(decode_timeline_combine_word(split, 1) - decode_timeline_combine_word(split, 0),
              kDecodeCombineTimelineSlots);
  }
}

TEST(MlaDecodeArgs, WorkspaceRegionsAreDisjointAndAligned) {
  // plan | kFast's combine counters (b · h_kv · row tiles int32) | partial lse | partial out.
  struct Shape {
    int batch, seqlen_q, heads_q, heads_kv, sms;
  };
  for (const Shape& s : {Shape{8, 1, 16, 1, 132}, Shape{3, 2, 128, 1, 132}, Shape{1, 1, 16, 1, 132},
                         Shape{5, 4, 128, 2, 78}, Shape{65535, 1, 16, 1, 132}}) {
    const DecodeWorkspaceLayout layout =
        decode_workspace_layout(s.batch, s.seqlen_q, s.heads_q, s.heads_kv, s.sms);
    const DecodeLaunchShape shape = decode_launch_shape(s.seqlen_q, s.heads_q, s.heads_kv, s.sms);
    const std::string label =
        fmt::format("b {} s_q {} h_q {} h_kv {}", s.batch, s.seqlen_q, s.heads_q, s.heads_kv);
    EXPECT_EQ(layout.num_combine_counters, int64_t(s.batch) * s.heads_kv * shape.num_row_tiles)
        << label;
    EXPECT_EQ(layout.plan_offset, 0u) << label;
    EXPECT_EQ(layout.combine_counters_offset % 256, 0u) << label;
    EXPECT_GE(layout.combine_counters_offset,
              sizeof(int32_t) * size_t(decode_plan_ints(s.batch, shape.num_parts)))
        << label;
    EXPECT_EQ(layout.partial_lse_offset % 256, 0u) << label;
    EXPECT_GE(layout.partial_lse_offset,
              layout.combine_counters_offset + sizeof(int32_t) * layout.num_combine_counters)
        << label;
    const size_t partial_rows = size_t(layout.max_splits) * s.heads_kv * shape.rows_per_kv_head;
    EXPECT_GE(layout.partial_out_offset, layout.partial_lse_offset + sizeof(float) * partial_rows)
        << label;
    EXPECT_EQ(layout.total_bytes, layout.partial_out_offset + sizeof(float) * partial_rows * 512)
        << label;
  }
  // h_q = 128, s_q = 2: 256 rows, four 64-row tiles per kv head.
  EXPECT_EQ(decode_workspace_layout(3, 2, 128, 1, 132).num_combine_counters, 12);
}

}  // namespace
}  // namespace mla::kernels
