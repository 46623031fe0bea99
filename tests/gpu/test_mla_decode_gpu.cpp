// The MLA decode op on the GPU against the CPU reference (src/ref), on random adversarial inputs:
// permuted block tables, NaN in every slot and page a sequence does not own, a huge sentinel id
// in unused block-table entries, seqlen 0, lengths not multiples of 64, ragged batches, one long
// sequence among short ones, h_q ∈ {1, 3, 16, 32, 64, 127, 128}, s_q ∈ {1..4}, causal on and off,
// batch 1..256 and 1,100. Outputs are poisoned first (every element must be written), runs are
// repeated (bit-identical), a CUDA graph of plan + decode is replayed with changing seqlens, and
// one workspace serves steps of several shapes, each decoded three times per plan (kFast's fused
// combine resets its counters). Every test runs both kernels.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "bench/gpu_decode_problem.h"
#include "core/error.h"
#include "gpu_test_support.h"
#include "mla/kernels/mla_decode.h"
#include "ref/mla_decode_ref.h"
#include "ref/paged_problem.h"

namespace mla {
namespace kernels {
// Test names and failure messages print the kernel by name.
void PrintTo(MlaDecodeKernel kernel, std::ostream* os) {
  *os << to_string(kernel);
}
}  // namespace kernels
namespace {

using kernels::MlaDecodeCombine;
using kernels::MlaDecodeKernel;
using kernels::MlaDecodeSchedule;

// What a test runs: kBaseline, and kFast with each of its two combines forced (kAuto picks one of
// them by a host rule that the CPU tests check), so both of kFast's paths see every case; kFast's
// 64-row body is the seesaw one as kAuto picks its order (pairs, or P·V first for small batches:
// what users get), plus the lockstep one with the fused combine (its only user).
struct KernelChoice {
  MlaDecodeKernel kernel;
  MlaDecodeCombine combine;
  MlaDecodeSchedule schedule = MlaDecodeSchedule::kAuto;
};
std::string name_of(const KernelChoice& choice) {
  if (choice.kernel == MlaDecodeKernel::kBaseline) return "baseline";
  return choice.schedule == MlaDecodeSchedule::kAuto
             ? fmt::format("fast_{}", kernels::to_string(choice.combine))
             : fmt::format("fast_{}_{}", kernels::to_string(choice.combine),
                           kernels::to_string(choice.schedule));
}
void PrintTo(const KernelChoice& choice, std::ostream* os) {
  *os << name_of(choice);
}

// The problem's decode params with the kernel, combine and schedule chosen.
kernels::MlaDecodeParams params_of(const bench::GpuDecodeProblem& gpu, const KernelChoice& choice) {
  kernels::MlaDecodeParams params = gpu.decode_params();
  params.kernel = choice.kernel;
  params.combine = choice.combine;
  params.schedule = choice.schedule;
  return params;
}

// poison → plan → decode, like GpuDecodeProblem::run, with the combine chosen.
// timeline: launch_mla_decode_with_timeline() into it instead of launch_mla_decode().
bench::DecodeOutputs run_decode(bench::GpuDecodeProblem& gpu, const KernelChoice& choice,
                                uint64_t* timeline = nullptr, uint64_t* pair_trace = nullptr) {
  gpu.poison_outputs(nullptr);
  kernels::launch_mla_decode_plan(gpu.plan_params(), nullptr);
  const kernels::MlaDecodeParams params = params_of(gpu, choice);
  if (timeline != nullptr)
    kernels::launch_mla_decode_with_timeline(params, timeline, nullptr);
  else if (pair_trace != nullptr)
    kernels::launch_mla_decode_with_pair_trace(params, pair_trace, nullptr);
  else
    kernels::launch_mla_decode(params, nullptr);
  return gpu.fetch(nullptr);
}

constexpr double kMaxRelativeL2 = 3e-3;
constexpr double kMaxLseRelative = 1e-5;

// No NaN, and out and lse within the tolerances above.
void expect_within_tolerance(const testing::Comparison& c) {
  EXPECT_EQ(c.nan_count, 0u);
  EXPECT_LE(c.relative_l2, kMaxRelativeL2);
  EXPECT_LE(c.max_lse_relative, kMaxLseRelative);
}

struct Reference {
  std::vector<float> out, lse;
};

Reference run_reference(const ref::PagedDecodeProblem& problem) {
  Reference r;
  r.out.resize(size_t(problem.batch) * problem.spec.seqlen_q * problem.spec.num_heads_q * 512);
  r.lse.resize(size_t(problem.batch) * problem.spec.num_heads_q * problem.spec.seqlen_q);
  ref::mla_decode(ref::ref_inputs(problem), r.out.data(), r.lse.data());
  return r;
}

int num_sms() {
  return cuda::current_device_info().num_sms;
}

// `want`: run_reference(problem), computed once by callers that check one problem several times.
// sms: the plan's and grid's SM count (0: the device's).
void check_problem_against_reference(const ref::PagedDecodeProblem& problem, const Reference& want,
                                     const KernelChoice& kernel, const std::string& label,
                                     int sms = 0) {
  bench::GpuDecodeProblem gpu(problem, sms > 0 ? sms : num_sms());
  const bench::DecodeOutputs got = run_decode(gpu, kernel);
  const testing::Comparison c = testing::compare_decode(got.out, want.out, got.lse, want.lse);
  EXPECT_EQ(c.nan_count, 0u) << label << ": NaN in the output (unwritten or poisoned)";
  EXPECT_EQ(c.inf_mismatch, 0u) << label
                                << ": infinite lse where the reference has none, or vice versa";
  EXPECT_LE(c.relative_l2, kMaxRelativeL2) << label;
  EXPECT_LE(c.max_lse_relative, kMaxLseRelative) << label;
  // Same inputs again: bit-identical results.
  const bench::DecodeOutputs again = run_decode(gpu, kernel);
  EXPECT_EQ(0, std::memcmp(got.out.data(), again.out.data(), got.out.size() * sizeof(float)))
      << label << ": out differs between two runs";
  EXPECT_EQ(0, std::memcmp(got.lse.data(), again.lse.data(), got.lse.size() * sizeof(float)))
      << label << ": lse differs between two runs";
}

void check_against_reference(const ref::PagedDecodeProblemSpec& spec, const KernelChoice& kernel,
                             const std::string& label, int sms = 0) {
  const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  check_problem_against_reference(problem, run_reference(problem), kernel, label, sms);
}

std::vector<int32_t> ragged_seqlens(int batch, int max_len, std::mt19937& rng) {
  std::uniform_int_distribution<int> length(0, max_len);
  std::vector<int32_t> seqlens(batch);
  for (int32_t& len : seqlens) len = length(rng);
  return seqlens;
}

class MlaDecodeGpu : public ::testing::TestWithParam<KernelChoice> {};

// kFast with kAuto: each of the seesaw's three orders (kAuto picks one by the batch); any other
// choice as it is.
std::vector<KernelChoice> with_every_seesaw_order(const KernelChoice& choice) {
  if (choice.kernel != MlaDecodeKernel::kFast || choice.schedule != MlaDecodeSchedule::kAuto)
    return {choice};
  std::vector<KernelChoice> choices = {choice, choice, choice};
  choices[0].schedule = MlaDecodeSchedule::kSeesawSFirst;
  choices[1].schedule = MlaDecodeSchedule::kSeesawPvFirst;
  choices[2].schedule = MlaDecodeSchedule::kSeesawPairs;
  return choices;
}

TEST_P(MlaDecodeGpu, HeadsQueryLengthsAndCausalSweep) {
  MLA_REQUIRE_SM90_GPU();
  std::mt19937 rng(1234);
  for (int heads : {1, 3, 16, 32, 64, 127, 128}) {
    for (int seqlen_q : {1, 2, 3, 4}) {
      for (bool causal : {false, true}) {
        ref::PagedDecodeProblemSpec spec;
        spec.num_heads_q = heads;
        spec.seqlen_q = seqlen_q;
        spec.causal = causal;
        spec.seed = rng();
        // Ragged, with an empty sequence and lengths that are not multiples of 64.
        spec.seqlens = {0, 1, 63, 65, 200, 517, 1000};
        spec.seqlens.resize(3 + rng() % 5);
        std::shuffle(spec.seqlens.begin(), spec.seqlens.end(), rng);
        check_against_reference(spec, GetParam(),
                                fmt::format("h_q {} s_q {} causal {} seqlens [{}]", heads, seqlen_q,
                                            causal, fmt::join(spec.seqlens, ",")));
      }
    }
  }
}

TEST_P(MlaDecodeGpu, SeesawPageParities) {
  MLA_REQUIRE_SM90_GPU();
  // The seesaw body alternates pages between its warpgroups and counts stages across a CTA's
  // pieces: sequences of 1, 2, 3, 5 pages (whole and partial last pages), pieces of one page (b = 1
  // split over every SM), many pieces per CTA with odd page counts (b = 97), causal s_q = 4 with
  // h_q = 128 (8 tiles per kv head), and h_q = 32 / 64 (one tile, padding rows); both orders.
  std::mt19937 rng(2024);
  struct Case {
    int heads, seqlen_q;
    bool causal;
    std::vector<int32_t> seqlens;
  };
  std::vector<Case> cases = {
      {128, 4, true, {64, 128, 192, 320, 1, 129, 257}},
      {128, 4, true, {131 * 64 + 5}},  // b = 1: pieces of one page or two
      {64, 1, false, {3 * 64, 5 * 64 - 1, 64 + 1, 0, 2 * 64}},
      {32, 2, true, {7 * 64 + 3, 64, 3}},
  };
  cases.push_back({128, 2, true, ragged_seqlens(97, 5 * 64, rng)});
  cases.push_back({64, 3, true, ragged_seqlens(33, 700, rng)});
  const std::vector<KernelChoice> choices = with_every_seesaw_order(GetParam());
  for (const Case& c : cases) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = c.heads;
    spec.seqlen_q = c.seqlen_q;
    spec.causal = c.causal;
    spec.seqlens = c.seqlens;
    spec.seed = rng();
    for (const KernelChoice& choice : choices) {
      check_against_reference(
          spec, choice,
          fmt::format("{}: h_q {} s_q {} causal {} b {} seqlens [{}]", name_of(choice), c.heads,
                      c.seqlen_q, c.causal, c.seqlens.size(), fmt::join(c.seqlens, ",")));
    }
  }
}

TEST_P(MlaDecodeGpu, ManyShortPiecesPerCta) {
  MLA_REQUIRE_SM90_GPU();
  // A plan for 4 SMs gives each CTA a dozen or more pieces of 1 to 4 pages, one after another:
  // the stage and phase counts carried across pieces (odd page counts flip the pairs order's
  // parities), the query tile's TMA phase per piece, and the staged epilogue's reuse of the query
  // tile and first stage before the next piece's copies. Every seesaw order, and the lockstep
  // body; and the 16-row body (h_q 16), whose queries are staged per piece through the stage the
  // piece's second page will use (two stages: the stage its previous piece's last page held).
  std::mt19937 rng(4242);
  const std::vector<KernelChoice> choices = with_every_seesaw_order(GetParam());
  struct Case {
    int heads, seqlen_q;
    bool causal;
  };
  for (const Case& c :
       {Case{128, 1, false}, Case{64, 2, true}, Case{32, 3, true}, Case{16, 1, false}}) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = c.heads;
    spec.seqlen_q = c.seqlen_q;
    spec.causal = c.causal;
    spec.seqlens = ragged_seqlens(60, 4 * 64, rng);
    spec.seqlens[3] = spec.seqlens[4] = 64;  // whole one-page pieces back to back
    spec.seqlens[5] = 1;
    spec.seed = rng();
    for (const KernelChoice& choice : choices) {
      check_against_reference(
          spec, choice,
          fmt::format("{}: 4 SMs, h_q {} s_q {} causal {} seqlens [{}]", name_of(choice), c.heads,
                      c.seqlen_q, c.causal, fmt::join(spec.seqlens, ",")),
          /*sms=*/4);
    }
  }
}

TEST_P(MlaDecodeGpu, BatchSizesOneTo256) {
  MLA_REQUIRE_SM90_GPU();
  std::mt19937 rng(99);
  for (int batch : {1, 2, 7, 32, 131, 256}) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = batch % 2 == 0 ? 16 : 64;
    spec.seqlen_q = 1 + batch % 2;
    spec.seqlens = ragged_seqlens(batch, batch > 100 ? 300 : 1500, rng);
    spec.q_stddev = 0.1f;
    spec.kv_stddev = 0.1f;
    spec.seed = rng();
    check_against_reference(spec, GetParam(), fmt::format("batch {}", batch));
  }
}

TEST_P(MlaDecodeGpu, MoreSequencesThanTheCombineListsAtOnce) {
  MLA_REQUIRE_SM90_GPU();
  // 1,100 sequences of up to 2 pages, some empty, and every 25th of 20 pages: over the one-wave
  // combine's list of 1,024 sequences a round, so its second round lists split and empty
  // sequences too (checked on the host plan below, so the case cannot silently lose them). On the
  // device's SMs and on 16 (a combine grid of 64 CTAs, so each warp merges several rows).
  std::mt19937 rng(1100);
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 16;
  spec.seqlens = ragged_seqlens(1100, 128, rng);
  for (int i = 0; i < 1100; i += 97) spec.seqlens[i] = 0;
  for (int i = 12; i < 1100; i += 25) spec.seqlens[i] = 20 * 64 - 3;
  spec.seed = rng();
  const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  const Reference want = run_reference(problem);
  for (int sms : {num_sms(), 16}) {
    const int parts =
        kernels::decode_launch_shape(spec.seqlen_q, spec.num_heads_q, 1, sms).num_parts;
    const std::vector<int32_t> plan = kernels::make_decode_plan_host(
        problem.seqlens.data(), problem.batch, parts, problem.max_pages_per_seq);
    const kernels::DecodePlanView view{plan.data(), problem.batch, parts};
    int split_in_second_round = 0, empty_in_second_round = 0;
    for (int seq = 1024; seq < problem.batch; ++seq) {
      split_in_second_round += view.num_splits(seq) >= 2 ? 1 : 0;
      empty_in_second_round += view.num_splits(seq) == 0 ? 1 : 0;
    }
    ASSERT_GE(split_in_second_round, 1) << sms << " SMs: the case lost its point";
    ASSERT_GE(empty_in_second_round, 1) << sms << " SMs";
    check_problem_against_reference(problem, want, GetParam(),
                                    fmt::format("1,100 sequences, {} SMs", sms), sms);
  }
}

TEST_P(MlaDecodeGpu, OneLongSequenceAmongShortOnes) {
  MLA_REQUIRE_SM90_GPU();
  std::mt19937 rng(5);
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 16;
  spec.seqlens = ragged_seqlens(40, 100, rng);
  spec.seqlens[17] = 30001;
  spec.seed = 77;
  check_against_reference(spec, GetParam(), "one of 30001 tokens among 39 short ones");
}

TEST_P(MlaDecodeGpu, SequenceOf128kTokens) {
  MLA_REQUIRE_SM90_GPU();
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 16;
  spec.seqlen_q = 2;
  spec.seqlens = {131072 + 37};
  spec.q_stddev = 0.5f;
  spec.kv_stddev = 0.5f;
  spec.seed = 128;
  check_against_reference(spec, GetParam(), "128k + 37 tokens");
}

TEST_P(MlaDecodeGpu, OneSequenceOf128kTokensSplitOverEverySm) {
  MLA_REQUIRE_SM90_GPU();
  // b = 1: every CTA of the grid holds a piece of the one sequence (16-row tiles: num_sms pieces;
  // h_q = 128: two 64-row tiles, num_sms / 2 pieces each), and they finish in whatever order the
  // SMs do. kFast's fused combine merges them inside the kernel (every CTA a share of the columns);
  // the launched combine kernels do it after.
  for (int heads : {16, 128}) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = heads;
    spec.seqlen_q = 1;
    spec.seqlens = {131072};
    spec.q_stddev = 0.5f;
    spec.kv_stddev = 0.5f;
    spec.seed = 1310 + heads;
    check_against_reference(spec, GetParam(), fmt::format("b 1, 131072 tokens, h_q {}", heads));
  }
}

TEST_P(MlaDecodeGpu, OneWorkspaceAcrossShapesAndRepeatedLayers) {
  MLA_REQUIRE_SM90_GPU();
  // One workspace (filled with 0xff bytes once: nothing may rely on it being zero) serves a series
  // of steps of different shapes and seqlens. Each step runs the plan once, then the decode three
  // times like three layers, outputs poisoned before each: kFast's fused launches find the combine
  // counters where the previous launch left them (each adds a sequence's number of pieces).
  struct Step {
    int heads, seqlen_q;
    std::vector<int32_t> seqlens;
  };
  const std::vector<Step> steps = {
      {16, 1, {20000}},                                     // b = 1, mma, ~num_sms pieces
      {16, 1, {4096, 0, 4000, 4096, 1, 4096, 3000, 4096}},  // b = 8, with an empty sequence
      {128, 2, {5000, 0, 3001}},                            // wgmma, 4 row tiles
      {64, 1, {9000}},                                      // wgmma, 1 tile, many pieces
      {16, 2, {0, 0, 0}},                                   // nothing to read at all
      {16, 1, {17000}},                                     // the first shape, new length
  };
  size_t bytes = 0;
  for (const Step& step : steps)
    bytes = std::max(bytes, kernels::mla_decode_workspace_size(
                                int(step.seqlens.size()), step.seqlen_q, step.heads, 1, num_sms()));
  cuda::DeviceBuffer<uint8_t> workspace(bytes);
  MLA_CUDA_CHECK(cudaMemset(workspace.data(), 0xff, bytes));
  std::mt19937 rng(606);
  for (size_t i = 0; i < steps.size(); ++i) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = steps[i].heads;
    spec.seqlen_q = steps[i].seqlen_q;
    spec.seqlens = steps[i].seqlens;
    spec.seed = rng();
    const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
    const Reference want = run_reference(problem);
    bench::GpuDecodeProblem gpu(problem, num_sms());
    kernels::MlaDecodePlanParams plan = gpu.plan_params();
    plan.workspace = workspace.data();
    plan.workspace_bytes = bytes;
    kernels::MlaDecodeParams params = gpu.decode_params();
    params.workspace = workspace.data();
    params.workspace_bytes = bytes;
    params.kernel = GetParam().kernel;
    params.combine = GetParam().combine;
    params.schedule = GetParam().schedule;
    kernels::launch_mla_decode_plan(plan, nullptr);
    for (int layer = 0; layer < 3; ++layer) {
      const std::string label =
          fmt::format("step {} (h_q {}, s_q {}, seqlens [{}]) layer {}", i, spec.num_heads_q,
                      spec.seqlen_q, fmt::join(spec.seqlens, ","), layer);
      gpu.poison_outputs(nullptr);
      kernels::launch_mla_decode(params, nullptr);
      const bench::DecodeOutputs got = gpu.fetch(nullptr);
      const testing::Comparison c = testing::compare_decode(got.out, want.out, got.lse, want.lse);
      EXPECT_EQ(c.nan_count, 0u) << label << ": NaN in the output (unwritten or poisoned)";
      EXPECT_EQ(c.inf_mismatch, 0u) << label;
      EXPECT_LE(c.relative_l2, kMaxRelativeL2) << label;
      EXPECT_LE(c.max_lse_relative, kMaxLseRelative) << label;
    }
  }
}

TEST_P(MlaDecodeGpu, PeakySoftmaxFromLargeScores) {
  MLA_REQUIRE_SM90_GPU();
  // q and k with std 3: scores of ~±25 after scaling, so a few keys dominate each row.
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 32;
  spec.seqlen_q = 2;
  spec.seqlens = {4000, 129, 1, 2048};
  spec.q_stddev = 3.f;
  spec.kv_stddev = 3.f;
  spec.seed = 31337;
  check_against_reference(spec, GetParam(), "peaky softmax");
}

TEST_P(MlaDecodeGpu, ScoresRisingPageByPage) {
  MLA_REQUIRE_SM90_GPU();
  // Every key scaled by 1 + 0.35 · (its page index), so each page's row maxima rise by ~3.3 (base
  // 2) over the page before: the running frame of the seesaw's pairs order (which moves only when
  // a page exceeds it by more than 2^8) moves every few pages, now on warpgroup 0's page of a pair,
  // now on warpgroup 1's, with O already holding earlier pairs, and P goes up to 2^8 in between.
  // Planned for 8 SMs, so that pieces are long (up to ~20 pages). Every seesaw order, both tile
  // counts. The cache here has one kv head: [pages, 64, 1, 576].
  const std::vector<KernelChoice> choices = with_every_seesaw_order(GetParam());
  for (int heads : {128, 64}) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = heads;
    spec.seqlen_q = 2;
    spec.seqlens = {64 * 23 + 9, 64 * 12, 64 * 40, 100};
    spec.seed = 777 + heads;
    ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
    ASSERT_EQ(problem.spec.num_heads_kv, 1);
    for (int b = 0; b < problem.batch; ++b) {
      for (int t = 0; t < spec.seqlens[b]; ++t) {
        const int64_t page = problem.block_table[size_t(b) * problem.max_pages_per_seq + t / 64];
        bf16* key = problem.kv_cache.data() + (page * 64 + t % 64) * kernels::kHeadDimQK;
        const float gain = 1.f + 0.35f * float(t / 64);
        for (int i = 0; i < kernels::kHeadDimQK; ++i)
          key[i] = float_to_bf16(bf16_to_float(key[i]) * gain);
      }
    }
    const Reference want = run_reference(problem);
    for (const KernelChoice& choice : choices)
      check_problem_against_reference(
          problem, want, choice, fmt::format("{}: h_q {}, rising scores", name_of(choice), heads),
          /*sms=*/8);
  }
}

TEST_P(MlaDecodeGpu, SeveralKvHeads) {
  MLA_REQUIRE_SM90_GPU();
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 32;
  spec.num_heads_kv = 2;
  spec.seqlen_q = 2;
  spec.seqlens = {300, 0, 1025};
  spec.seed = 8;
  check_against_reference(spec, GetParam(), "h_kv 2");
}

TEST_P(MlaDecodeGpu, DevicePlanEqualsHostPlan) {
  MLA_REQUIRE_SM90_GPU();
  // Word for word, including batches larger than one scan chunk of the plan kernel (1024) and one
  // too large to stage in shared memory (decode_plan_staged()), with the balanced plan, the
  // sequence-aligned one (equal and ragged lengths, and turned off) and a minimum cost per part.
  // The plan also zeroes kFast's combine counters (the workspace starts as 0xff bytes).
  std::mt19937 rng(3);
  int aligned_plans = 0, balanced_plans = 0, aligned_large_batches = 0;
  int staged_plans = 0, unstaged_plans = 0, aligned_unstaged_plans = 0;
  for (int batch : {1, 5, 64, 1500, 3000, 5000}) {
    for (int heads : {8, 16, 128}) {  // 16, 32 and 256 rows a kv head (s_q = 2)
      for (int variant = 0; variant < 5; ++variant) {
        const int min_cost = variant == 1 ? 9 : 0;
        const bool equal_lengths = variant == 2;
        const bool sequence_aligned = variant != 3;
        std::vector<int32_t> seqlens = ragged_seqlens(batch, 3000, rng);
        if (equal_lengths) std::fill(seqlens.begin(), seqlens.end(), 1900);
        // Variant 4: most sequences empty, so that large batches (several scan chunks of the
        // plan kernel) can take the sequence-aligned plan too; at 5000 (not staged) 100 busy
        // sequences of 1900 tokens do not fit 132 parts with T ≤ C, 640 do (16 and 32 rows).
        if (variant == 4) {
          const int busy_length = batch > 4000 ? 640 : 1900;
          for (size_t i = 0; i < seqlens.size(); ++i) seqlens[i] = i % 50 == 7 ? busy_length : 0;
        }
        seqlens[0] = -3;        // negative counts as empty
        seqlens.back() = 5000;  // beyond the block table's capacity: clamped
        const int max_pages = 3000 / 64 + 1;
        const kernels::DecodeLaunchShape shape =
            kernels::decode_launch_shape(2, heads, 1, num_sms());
        cuda::DeviceBuffer<int32_t> d_seqlens(seqlens.size());
        d_seqlens.copy_from_host(seqlens);
        const size_t bytes = kernels::mla_decode_workspace_size(batch, 2, heads, 1, num_sms());
        cuda::DeviceBuffer<uint8_t> workspace(bytes);
        MLA_CUDA_CHECK(cudaMemset(workspace.data(), 0xff, bytes));
        kernels::MlaDecodePlanParams params;
        params.seqlens = d_seqlens.data();
        params.batch = batch;
        params.seqlen_q = 2;
        params.num_heads_q = heads;
        params.num_sms = num_sms();
        params.max_pages_per_seq = max_pages;
        params.workspace = workspace.data();
        params.workspace_bytes = bytes;
        params.min_cost_per_part = min_cost;
        params.sequence_aligned = sequence_aligned;
        kernels::launch_mla_decode_plan(params, nullptr);
        const std::vector<int32_t> want = kernels::make_decode_plan_host(
            seqlens.data(), batch, shape.num_parts, max_pages,
            kernels::plan_min_cost_per_part(params), kernels::plan_sequence_aligned(params),
            shape.rows_per_tile);
        std::vector<int32_t> got(want.size());
        MLA_CUDA_CHECK(cudaMemcpy(got.data(), workspace.data(), got.size() * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost));
        EXPECT_EQ(got, want) << "batch " << batch << " h_q " << heads << " variant " << variant;
        const bool aligned =
            kernels::DecodePlanView{want.data(), batch, shape.num_parts}.sequence_aligned();
        (aligned ? aligned_plans : balanced_plans) += 1;
        const bool staged = kernels::decode_plan_staged(batch, shape.num_parts);
        (staged ? staged_plans : unstaged_plans) += 1;
        if (aligned && !staged) ++aligned_unstaged_plans;
        if (aligned && batch > 1024) ++aligned_large_batches;
        if (!sequence_aligned || min_cost > 1) {
          EXPECT_FALSE(aligned) << "variant " << variant;
        }
        const kernels::DecodeWorkspaceLayout layout =
            kernels::decode_workspace_layout(batch, 2, heads, 1, num_sms());
        std::vector<int32_t> counters(layout.num_combine_counters, -1);
        MLA_CUDA_CHECK(cudaMemcpy(counters.data(),
                                  workspace.data() + layout.combine_counters_offset,
                                  counters.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
        EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), int64_t(counters.size()))
            << "combine counters not zeroed, batch " << batch << " h_q " << heads;
      }
    }
  }
  // Both plans were compared (unless the environment turned the aligned one off).
  if (kernels::plan_sequence_aligned(kernels::MlaDecodePlanParams{})) {
    EXPECT_GE(aligned_plans, 8);
    EXPECT_GE(aligned_large_batches, 2) << "no aligned plan over several scan chunks";
    EXPECT_GE(aligned_unstaged_plans, 2) << "no aligned plan made in global memory";
  }
  EXPECT_GE(balanced_plans, 4);
  EXPECT_GE(staged_plans, 60);    // batches 1 to 3000
  EXPECT_GE(unstaged_plans, 15);  // batch 5000
}

TEST_P(MlaDecodeGpu, SmallBatchWithMoreCombineCtasThanTwoAnSm) {
  MLA_REQUIRE_SM90_GPU();
  // kFast's sliced combine in its light form (two loads in flight per thread, four CTAs an SM):
  // a small batch whose combine grid (a CTA per row) has more CTAs than two an SM. 24 ragged
  // sequences and one long one, whose pieces take several of the light form's rounds (8 pieces a
  // round); lengths not multiples of 64, one sequence empty.
  std::mt19937 rng(77);
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 16;
  spec.seqlen_q = 1;
  spec.seqlens = ragged_seqlens(24, 2600, rng);
  spec.seqlens[3] = 0;
  spec.seqlens.push_back(20000);
  spec.seed = 21;
  const int batch = static_cast<int>(spec.seqlens.size());
  ASSERT_TRUE(kernels::decode_combine_is_sliced(batch, 1, 16, 1, num_sms()));
  kernels::MlaDecodeParams shape;
  shape.batch = batch;
  shape.num_heads_q = 16;
  shape.num_sms = num_sms();
  shape.kernel = MlaDecodeKernel::kFast;
  ASSERT_GT(kernels::decode_timeline_combine_ctas(shape), 2 * int64_t(num_sms()));
  check_against_reference(spec, GetParam(), "25 sequences, 16 heads");
  // The long sequence's last 16 keys each dominate one head's row (key = 2 · that head's query:
  // a score of ~2 · scale · |q|² ≈ 130 against a few), so its last piece's lse is ~120 above the
  // others': a combine that took a row's largest lse from the first round's pieces alone (its
  // first 8) would overflow exp and return inf or NaN.
  ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  ASSERT_EQ(problem.spec.num_heads_kv, 1);
  const int long_seq = batch - 1;
  const int length = spec.seqlens[long_seq];
  for (int head = 0; head < 16; ++head) {
    const int t = length - 16 + head;
    const int64_t page = problem.block_table[size_t(long_seq) * problem.max_pages_per_seq + t / 64];
    bf16* key = problem.kv_cache.data() + (page * 64 + t % 64) * kernels::kHeadDimQK;
    const bf16* query = problem.q.data() + (size_t(long_seq) * 16 + head) * kernels::kHeadDimQK;
    for (int i = 0; i < kernels::kHeadDimQK; ++i)
      key[i] = float_to_bf16(2.f * bf16_to_float(query[i]));
  }
  check_problem_against_reference(problem, run_reference(problem), GetParam(),
                                  "25 sequences, 16 heads, dominant keys in the last piece");
}

TEST_P(MlaDecodeGpu, SequenceAlignedAndBalancedPlansBothMatchTheReference) {
  MLA_REQUIRE_SM90_GPU();
  // Equal lengths the sequence-aligned plan takes (b = 8 in one-page pieces; b = 32 over two row
  // tiles in pieces of 5 pages, the last page partial) and a ragged batch, each decoded under the
  // plan as made by default and under the balanced plan.
  struct Case {
    int heads, seqlen_q;
    std::vector<int> seqlens;
    bool expect_aligned;
  };
  const std::vector<Case> cases = {
      {16, 1, std::vector<int>(8, 1000), true},
      {128, 1, std::vector<int>(32, 600), true},
      {64, 2, {700, 1, 2900, 64, 65, 0, 1300}, false},
  };
  std::mt19937 rng(808);
  for (const Case& c : cases) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = c.heads;
    spec.seqlen_q = c.seqlen_q;
    spec.seqlens = c.seqlens;
    spec.seed = rng();
    const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
    const Reference want = run_reference(problem);
    bench::GpuDecodeProblem gpu(problem, num_sms());
    for (bool sequence_aligned : {true, false}) {
      const std::string label = fmt::format("b {} h_q {} s_q {}, sequence_aligned {}",
                                            problem.batch, c.heads, c.seqlen_q, sequence_aligned);
      gpu.poison_outputs(nullptr);
      kernels::MlaDecodePlanParams plan = gpu.plan_params();
      plan.sequence_aligned = sequence_aligned;
      kernels::launch_mla_decode_plan(plan, nullptr);
      const kernels::DecodeWorkspaceLayout layout =
          kernels::decode_workspace_layout(problem.batch, c.seqlen_q, c.heads, 1, plan.num_sms);
      int32_t header[kernels::kDecodePlanHeaderInts];
      MLA_CUDA_CHECK(cudaMemcpy(header, static_cast<uint8_t*>(plan.workspace) + layout.plan_offset,
                                sizeof(header), cudaMemcpyDeviceToHost));
      const int parts =
          kernels::decode_launch_shape(c.seqlen_q, c.heads, 1, plan.num_sms).num_parts;
      const bool aligned = kernels::DecodePlanView{header, problem.batch, parts}.sequence_aligned();
      if (!kernels::plan_sequence_aligned(plan)) {
        EXPECT_FALSE(aligned) << label;
      } else if (c.expect_aligned) {
        EXPECT_TRUE(aligned) << label;
      }
      kernels::launch_mla_decode(params_of(gpu, GetParam()), nullptr);
      const bench::DecodeOutputs got = gpu.fetch(nullptr);
      const testing::Comparison cmp = testing::compare_decode(got.out, want.out, got.lse, want.lse);
      EXPECT_EQ(cmp.nan_count, 0u) << label;
      EXPECT_EQ(cmp.inf_mismatch, 0u) << label;
      EXPECT_LE(cmp.relative_l2, kMaxRelativeL2) << label;
      EXPECT_LE(cmp.max_lse_relative, kMaxLseRelative) << label;
    }
  }
}

TEST_P(MlaDecodeGpu, CudaGraphReplayWithChangingSeqlens) {
  MLA_REQUIRE_SM90_GPU();
  // Capacity for 2000 tokens per sequence; every replay uses new lengths within it.
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 64;
  spec.seqlen_q = 2;
  spec.seqlens = {2000, 2000, 2000, 2000, 2000, 2000};
  spec.seed = 4242;
  ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  bench::GpuDecodeProblem gpu(problem, num_sms());
  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  kernels::MlaDecodeParams params = gpu.decode_params();
  params.kernel = GetParam().kernel;
  params.combine = GetParam().combine;
  params.schedule = GetParam().schedule;
  cudaGraph_t graph;
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  kernels::launch_mla_decode_plan(gpu.plan_params(), stream);
  kernels::launch_mla_decode(params, stream);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::mt19937 rng(11);
  for (int replay = 0; replay < 5; ++replay) {
    std::vector<int32_t> seqlens = ragged_seqlens(6, 2000, rng);
    if (replay == 2) seqlens = {0, 0, 0, 0, 0, 1};
    if (replay == 3) seqlens = {2000, 1, 2000, 64, 2000, 1999};
    gpu.set_seqlens(seqlens, stream);
    gpu.poison_outputs(stream);
    MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    const bench::DecodeOutputs got = gpu.fetch(stream);
    ref::PagedDecodeProblem current = problem;
    current.seqlens = seqlens;
    const Reference want = run_reference(current);
    const testing::Comparison c = testing::compare_decode(got.out, want.out, got.lse, want.lse);
    EXPECT_EQ(c.nan_count, 0u) << "replay " << replay;
    EXPECT_EQ(c.inf_mismatch, 0u) << "replay " << replay;
    EXPECT_LE(c.relative_l2, kMaxRelativeL2) << "replay " << replay;
    EXPECT_LE(c.max_lse_relative, kMaxLseRelative) << "replay " << replay;
  }
  MLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MLA_CUDA_CHECK(cudaGraphDestroy(graph));
  MLA_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_P(MlaDecodeGpu, NonContiguousStrides) {
  MLA_REQUIRE_SM90_GPU();
  // The same problem through padded q rows (NaN in the padding), a padded cache (token rows and
  // pages, NaN in the padding) and a padded output: strides are honoured, by the query tiles' TMA
  // map too (h_q 16 · s_q 2: 4 positions per box, two of them past s_q; 128 · 1: 64 heads; 32 · 3:
  // two tiles, the second half past s_q), and by the cache's maps (the pairs order's half-page
  // map included: every case runs it with kFast's launched combine, the schedule forced below).
  struct Case {
    int heads, seqlen_q;
  };
  for (const Case& c : {Case{16, 2}, Case{128, 1}, Case{32, 3}}) {
    ref::PagedDecodeProblemSpec spec;
    spec.num_heads_q = c.heads;
    spec.seqlen_q = c.seqlen_q;
    spec.seqlens = {700, 129};
    spec.seed = 21;
    const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
    const Reference want = run_reference(problem);
    bench::GpuDecodeProblem gpu(problem, num_sms());
    kernels::MlaDecodeParams params = params_of(gpu, GetParam());
    constexpr int kPadQ = 64, kPadOut = 128;
    const int rows = problem.batch * spec.seqlen_q * spec.num_heads_q;
    std::vector<bf16> q_padded(size_t(rows) * (576 + kPadQ), float_to_bf16(NAN));
    for (int r = 0; r < rows; ++r)
      std::memcpy(&q_padded[size_t(r) * (576 + kPadQ)], &problem.q[size_t(r) * 576],
                  576 * sizeof(bf16));
    cuda::DeviceBuffer<bf16> q(q_padded.size()), out(size_t(rows) * (512 + kPadOut));
    q.copy_from_host(q_padded);
    MLA_CUDA_CHECK(cudaMemset(out.data(), 0xff, out.bytes()));
    params.q = q.data();
    params.q_head_stride = 576 + kPadQ;
    params.q_seq_stride = params.q_head_stride * spec.num_heads_q;
    params.q_batch_stride = params.q_seq_stride * spec.seqlen_q;
    params.out = out.data();
    params.out_head_stride = 512 + kPadOut;
    params.out_seq_stride = params.out_head_stride * spec.num_heads_q;
    params.out_batch_stride = params.out_seq_stride * spec.seqlen_q;
    // The cache ([pages, 64 tokens, h_kv = 1, 576]) with 64 padding elements after each token row
    // and 8 padding rows after each page.
    ASSERT_EQ(spec.num_heads_kv, 1);
    constexpr int kTokenStride = 576 + 64, kPageStride = (64 + 8) * kTokenStride;
    std::vector<bf16> kv_padded(size_t(problem.num_pages) * kPageStride, float_to_bf16(NAN));
    for (int page = 0; page < problem.num_pages; ++page)
      for (int t = 0; t < 64; ++t)
        std::memcpy(&kv_padded[size_t(page) * kPageStride + size_t(t) * kTokenStride],
                    &problem.kv_cache[(size_t(page) * 64 + t) * 576], 576 * sizeof(bf16));
    cuda::DeviceBuffer<bf16> kv(kv_padded.size());
    kv.copy_from_host(kv_padded);
    params.kv_cache = kv.data();
    params.kv_token_stride = kTokenStride;
    params.kv_head_stride = kTokenStride;  // one kv head: any stride the checks accept
    params.kv_page_stride = kPageStride;
    if (params.kernel == MlaDecodeKernel::kFast && params.combine == MlaDecodeCombine::kLaunched &&
        spec.num_heads_q * spec.seqlen_q > 16)
      params.schedule = MlaDecodeSchedule::kSeesawPairs;
    kernels::launch_mla_decode_plan(gpu.plan_params(), nullptr);
    kernels::launch_mla_decode(params, nullptr);
    const std::vector<bf16> out_padded = out.to_host();
    std::vector<float> got(size_t(rows) * 512);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < 512; ++d)
        got[size_t(r) * 512 + d] = bf16_to_float(out_padded[size_t(r) * (512 + kPadOut) + d]);
    const bench::DecodeOutputs lse_only = gpu.fetch(nullptr);
    SCOPED_TRACE(fmt::format("h_q {} s_q {}", c.heads, c.seqlen_q));
    expect_within_tolerance(testing::compare_decode(got, want.out, lse_only.lse, want.lse));
  }
}

// kFused's CTAs wait for each other: a grid larger than the device (num_sms beyond its SMs) is
// refused with a message, and kAuto launches the combine instead (and stays correct).
TEST(MlaDecodeGpuFused, RefusesAGridLargerThanTheDevice) {
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 16;
  spec.seqlens = {5000};
  const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  bench::GpuDecodeProblem gpu(problem, 2 * num_sms());
  kernels::MlaDecodeParams params = gpu.decode_params();
  params.kernel = MlaDecodeKernel::kFast;
  params.combine = MlaDecodeCombine::kFused;
  try {
    kernels::launch_mla_decode(params, nullptr);
    ADD_FAILURE() << "kFused with a grid of twice the device's SMs was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("resident"), std::string::npos) << error.what();
  }
  const Reference want = run_reference(problem);
  const bench::DecodeOutputs got =
      run_decode(gpu, {MlaDecodeKernel::kFast, MlaDecodeCombine::kAuto});
  expect_within_tolerance(testing::compare_decode(got.out, want.out, got.lse, want.lse));
}

// The timeline instantiations (diagnostics) compute the same output as the production kernel and
// stamp every phase in order: per CTA with work, entry ≤ first piece ≤ queries ≤ first page ≤
// pages computed ≤ stored ≤ exit on both clocks; a CTA without work stamps entry, first piece and
// exit. Before each checked run, a run in which every CTA has work leaves its stamps in every
// SM's shared memory (the 16-row body keeps them there), so a CTA without work that did not clear
// them would report stale phases. `heads` 16: the 16-row body; more: the seesaw. `copies` of the
// four sequences: 1 is a small batch at 16 and 128 heads (the sliced combine); 2 at 128 heads is
// not (the one-wave combine).
void check_timeline(int heads, const KernelChoice& choice, const std::string& label,
                    int copies = 1) {
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = heads;
  ref::PagedDecodeProblemSpec busy_spec = spec;
  for (int i = 0; i < copies; ++i) {
    for (int len : {3000, 0, 70, 1}) spec.seqlens.push_back(len);   // split, empty, 2 pages, 1 key
    for (int k = 0; k < 4; ++k) busy_spec.seqlens.push_back(8192);  // work for every CTA
  }
  const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  bench::GpuDecodeProblem gpu(problem, num_sms());
  bench::GpuDecodeProblem busy(ref::make_paged_decode_problem(busy_spec), num_sms());
  ASSERT_TRUE(kernels::decode_timeline_applies(params_of(gpu, choice))) << label;
  const bench::DecodeOutputs want = run_decode(gpu, choice);
  const int64_t words = kernels::mla_decode_timeline_words(gpu.decode_params());
  cuda::DeviceBuffer<uint64_t> busy_timeline(
      static_cast<size_t>(kernels::mla_decode_timeline_words(busy.decode_params())));
  run_decode(busy, choice, busy_timeline.data());
  cuda::DeviceBuffer<uint64_t> timeline(static_cast<size_t>(words));
  MLA_CUDA_CHECK(cudaMemset(timeline.data(), 0, timeline.bytes()));
  const bench::DecodeOutputs got = run_decode(gpu, choice, timeline.data());
  EXPECT_EQ(0, std::memcmp(got.out.data(), want.out.data(), got.out.size() * sizeof(float)))
      << label << ": the timeline instantiation's output differs";
  EXPECT_EQ(0, std::memcmp(got.lse.data(), want.lse.data(), got.lse.size() * sizeof(float)))
      << label;
  const std::vector<uint64_t> stamps = timeline.to_host();
  constexpr int kSlots = kernels::kDecodeTimelineSlots;
  int with_work = 0;
  const int64_t ctas = kernels::decode_timeline_split_ctas(gpu.decode_params());
  const int64_t combine_ctas = kernels::decode_timeline_combine_ctas(gpu.decode_params());
  ASSERT_EQ(kernels::decode_timeline_combine_word(ctas, combine_ctas), words) << label;
  // After the stamps, the SM of each CTA: an SM id (%smid need not be contiguous, so the bound
  // is loose), and not one SM for the whole grid.
  const uint64_t* sm_of_cta = stamps.data() + ctas * 2 * kSlots;
  for (int64_t cta = 0; cta < ctas; ++cta)
    EXPECT_LT(sm_of_cta[cta], uint64_t(2 * num_sms())) << label << ": CTA " << cta << "'s SM id";
  EXPECT_NE(*std::min_element(sm_of_cta, sm_of_cta + ctas),
            *std::max_element(sm_of_cta, sm_of_cta + ctas))
      << label << ": every CTA reports the same SM";
  for (int64_t cta = 0; cta < ctas; ++cta) {
    for (int clock = 0; clock < 2; ++clock) {
      const uint64_t* t = stamps.data() + (cta * 2 + clock) * kSlots;
      ASSERT_NE(t[0], 0u) << label << ": CTA " << cta << " never stamped its entry";
      ASSERT_NE(t[kSlots - 1], 0u) << label << ": CTA " << cta << " never stamped its exit";
      const bool has_work = t[2] != 0;
      if (clock == 0 && has_work) ++with_work;
      uint64_t previous = 0;
      for (int slot = 0; slot < kSlots; ++slot) {
        const bool expected = has_work || slot == 0 || slot == 1 || slot == kSlots - 1;
        EXPECT_EQ(t[slot] != 0, expected) << label << ": CTA " << cta << ", slot " << slot;
        if (t[slot] == 0) continue;
        EXPECT_GE(t[slot], previous) << label << ": CTA " << cta << ", slot " << slot;
        previous = t[slot];
      }
    }
  }
  EXPECT_GT(with_work, 1) << label << ": the 3000-token sequence splits over several CTAs";

  // The launched combine's CTAs: each stamps its start, its release from the wait for the split
  // grid and its end, in that order, and no release comes before a split CTA's exit (the wait is
  // for the whole grid); the fused combine launches none, and its words stay 0.
  uint64_t last_split_exit = 0;
  for (int64_t cta = 0; cta < ctas; ++cta)
    last_split_exit = std::max(last_split_exit, stamps[size_t(cta * 2 * kSlots + kSlots - 1)]);
  const bool launched = choice.combine != MlaDecodeCombine::kFused;
  for (int64_t c = 0; c < combine_ctas; ++c) {
    const uint64_t* t = stamps.data() + kernels::decode_timeline_combine_word(ctas, c);
    const std::string where = fmt::format("{}: combine CTA {}", label, c);
    for (int slot = 0; slot < kernels::kDecodeCombineTimelineSlots; ++slot)
      EXPECT_EQ(t[slot] != 0, launched) << where << ", slot " << slot;
    if (!launched) continue;
    EXPECT_LE(t[0], t[1]) << where;
    EXPECT_LE(t[1], t[2]) << where;
    EXPECT_GE(t[1], last_split_exit) << where << ": released before the split grid's last exit";
  }
}

TEST(MlaDecodeGpuTimeline, SameOutputAndPhasesInOrder) {
  MLA_REQUIRE_SM90_GPU();
  for (MlaDecodeCombine combine : {MlaDecodeCombine::kLaunched, MlaDecodeCombine::kFused})
    check_timeline(16, {MlaDecodeKernel::kFast, combine}, kernels::to_string(combine));
  for (MlaDecodeSchedule order :
       {MlaDecodeSchedule::kSeesawPairs, MlaDecodeSchedule::kSeesawPvFirst}) {
    check_timeline(128, {MlaDecodeKernel::kFast, MlaDecodeCombine::kLaunched, order},
                   kernels::to_string(order));
  }
  check_timeline(128, {MlaDecodeKernel::kFast, MlaDecodeCombine::kLaunched},
                 "8 sequences, the one-wave combine", /*copies=*/2);
}

// A launch the timeline does not record is refused with a message, not run unrecorded.
TEST(MlaDecodeGpuTimeline, RefusedWhereNoBodyRecords) {
  MLA_REQUIRE_SM90_GPU();
  ref::PagedDecodeProblemSpec spec;
  spec.num_heads_q = 128;
  spec.seqlens = {300};
  bench::GpuDecodeProblem gpu(ref::make_paged_decode_problem(spec), num_sms());
  cuda::DeviceBuffer<uint64_t> timeline(
      static_cast<size_t>(kernels::mla_decode_timeline_words(gpu.decode_params())));
  for (const KernelChoice& choice :
       {KernelChoice{MlaDecodeKernel::kBaseline, MlaDecodeCombine::kAuto},
        KernelChoice{MlaDecodeKernel::kFast, MlaDecodeCombine::kFused,
                     MlaDecodeSchedule::kSeesawPairs},
        KernelChoice{MlaDecodeKernel::kFast, MlaDecodeCombine::kLaunched,
                     MlaDecodeSchedule::kSeesawSFirst}}) {
    EXPECT_FALSE(kernels::decode_timeline_applies(params_of(gpu, choice))) << name_of(choice);
    EXPECT_THROW(run_decode(gpu, choice, timeline.data()), mla::Error) << name_of(choice);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, MlaDecodeGpu,
    ::testing::Values(KernelChoice{MlaDecodeKernel::kBaseline, MlaDecodeCombine::kAuto},
                      KernelChoice{MlaDecodeKernel::kFast, MlaDecodeCombine::kFused},
                      KernelChoice{MlaDecodeKernel::kFast, MlaDecodeCombine::kLaunched},
                      KernelChoice{MlaDecodeKernel::kFast, MlaDecodeCombine::kFused,
                                   MlaDecodeSchedule::kLockstep}),
    [](const auto& info) { return name_of(info.param); });

}  // namespace
// The pairs order's trace: the same output as the production kernel, and for every pair each CTA
// recorded (of its first piece, then of its second), each warpgroup's events in the order its code
// reaches them, pairs one after another, and each cross-warpgroup wait ending after what it waits
// for; every CTA's pieces in order, covering every page once per row tile. A launch that does not
// run the pairs order is refused.
TEST(MlaDecodeGpuPairTrace, SameOutputAndEventsInOrder) {
  MLA_REQUIRE_SM90_GPU();
  ref::PagedDecodeProblemSpec spec;
  spec.seqlen_q = 2;
  spec.num_heads_q = 128;
  spec.seqlens = {64 * 40 - 5, 64 * 33, 700};  // CTA (0, 0) gets several pairs of the first one
  const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);
  bench::GpuDecodeProblem gpu(problem, /*num_sms=*/8);
  const KernelChoice pairs{MlaDecodeKernel::kFast, MlaDecodeCombine::kLaunched,
                           MlaDecodeSchedule::kSeesawPairs};
  const bench::DecodeOutputs want = run_decode(gpu, pairs);
  const int64_t words = kernels::decode_pair_trace_words(params_of(gpu, pairs));
  const int64_t ctas = words / kernels::kDecodePairTraceWords;
  ASSERT_EQ(words, ctas * kernels::kDecodePairTraceWords);
  cuda::DeviceBuffer<uint64_t> trace(static_cast<size_t>(words));
  constexpr int kPairs = kernels::kDecodePairTracePairs, kEvents = kernels::kDecodePairTraceEvents;

  // Checks the complete pairs CTA `cta` recorded; returns how many there are.
  auto check_cta = [&](const std::vector<uint64_t>& t, int64_t cta, int piece) {
    auto at = [&](int group, int pair, int event) {
      return t[cta * kernels::kDecodePairTraceWords + (size_t(group) * kPairs + pair) * kEvents +
               event];
    };
    int full_pairs = 0;
    for (int pair = 0; pair < kPairs; ++pair) {
      bool full = true;
      for (int group = 0; group < 2; ++group)
        for (int event = 0; event < kEvents; ++event) full = full && at(group, pair, event) != 0;
      if (!full) continue;
      ++full_pairs;
      const std::string where = fmt::format("CTA {}, piece {}, pair {}", cta, piece, pair);
      for (int group = 0; group < 2; ++group) {
        for (int event = 1; event < kEvents; ++event) {
          EXPECT_GE(at(group, pair, event), at(group, pair, event - 1))
              << where << ", warpgroup " << group << ", event " << event;
        }
        if (pair > 0 && at(group, pair - 1, kEvents - 1) != 0) {
          EXPECT_GE(at(group, pair, 0), at(group, pair - 1, kEvents - 1))
              << where << ", warpgroup " << group;
        }
      }
      // A receiver's stamp after a barrier follows the publisher's last stamp before its
      // arrival: {receiver, its event, publisher, the publisher's event}. (Stamps after a barrier
      // read the clock after a shared load: a plain read there returned the warp's arrival, and
      // checks like these failed by up to ~1,000 cycles on the H200, 2026-12-02.)
      constexpr int kWaits[4][4] = {
          {1, 2, 0, 2},     // past the S-issued barrier after S_a issued
          {1, 4, 0, 4},     // P_a received after it was exponentiated
          {0, 10, 1, 7},    // P_b received after it was exponentiated
          {1, 12, 0, 11}};  // P_b·V after warpgroup 0's (its last stamp before its arrival)
      for (const auto& wait : kWaits) {
        EXPECT_GE(at(wait[0], pair, wait[1]), at(wait[2], pair, wait[3]))
            << where << ": warpgroup " << wait[0] << "'s "
            << kernels::decode_pair_trace_event(wait[0], wait[1]) << " came before warpgroup "
            << wait[2] << "'s " << kernels::decode_pair_trace_event(wait[2], wait[3]);
      }
    }
    return full_pairs;
  };

  // Every CTA's first piece, then every CTA's second: the same output as production each time.
  int first_cta_pairs = 0;
  for (int piece = 0; piece < 2; ++piece) {
    MLA_CUDA_CHECK(cudaMemset(trace.data(), 0, trace.bytes()));
    gpu.poison_outputs(nullptr);
    kernels::launch_mla_decode_plan(gpu.plan_params(), nullptr);
    kernels::launch_mla_decode_with_pair_trace(params_of(gpu, pairs), trace.data(), nullptr, piece);
    const bench::DecodeOutputs got = gpu.fetch(nullptr);
    EXPECT_EQ(0, std::memcmp(got.out.data(), want.out.data(), got.out.size() * sizeof(float)))
        << "the traced instantiation's output differs (piece " << piece << ")";
    EXPECT_EQ(0, std::memcmp(got.lse.data(), want.lse.data(), got.lse.size() * sizeof(float)));
    const std::vector<uint64_t> t = trace.to_host();
    int recording = 0;
    for (int64_t cta = 0; cta < ctas; ++cta) {
      const int full_pairs = check_cta(t, cta, piece);
      recording += full_pairs > 0;
      if (piece == 0 && cta == 0) first_cta_pairs = full_pairs;
    }
    // Three sequences over 8 SMs' parts: some CTA's part spans a sequence boundary, so a second
    // piece with a complete pair exists.
    EXPECT_GE(recording, 1) << "no CTA recorded a complete pair of its piece " << piece;

    // The piece trace: every CTA's pieces, each one's events in order and after the previous
    // piece's, none left out (this problem gives a CTA at most 3 pieces), and their pages summing
    // to every sequence's pages once per row tile.
    constexpr int kFields = kernels::kDecodePieceTraceFields;
    constexpr int kPieceEvents = kernels::kDecodePieceTraceEvents;
    int64_t traced_pages = 0;
    for (int64_t cta = 0; cta < ctas; ++cta) {
      const uint64_t* words =
          t.data() + cta * kernels::kDecodePairTraceWords + kernels::kDecodePairTracePairWords;
      for (int k = 0; k < kernels::kDecodePieceTracePieces; ++k) {
        const uint64_t* f = words + k * kFields;
        if (f[0] == 0) {
          EXPECT_EQ(f[kPieceEvents], 0u) << "CTA " << cta << ": piece " << k << " has pages";
          break;
        }
        const std::string where = fmt::format("CTA {}, piece {}", cta, k);
        for (int e = 1; e < kPieceEvents; ++e)
          EXPECT_GE(f[e], f[e - 1]) << where << ", " << kernels::decode_piece_trace_event(e);
        if (k > 0) {
          const uint64_t previous_copies_issued = words[(k - 1) * kFields + kPieceEvents - 1];
          EXPECT_GE(f[0], previous_copies_issued) << where;
        }
        EXPECT_GE(f[kPieceEvents], 1u) << where;
        traced_pages += int64_t(f[kPieceEvents]);
      }
      ASSERT_EQ(words[(kernels::kDecodePieceTracePieces - 1) * kFields], 0u)
          << "CTA " << cta << " filled every recorded piece: the page sum below would miss some";
    }
    const kernels::MlaDecodeParams traced = params_of(gpu, pairs);
    const int rows_per_kv_head = spec.seqlen_q * spec.num_heads_q / traced.num_heads_kv;
    int64_t sequence_pages = 0;
    for (const int len : spec.seqlens) sequence_pages += (len + 63) / 64;
    EXPECT_EQ(traced_pages, sequence_pages * traced.num_heads_kv * ((rows_per_kv_head + 63) / 64))
        << "the piece trace's pages (launch for piece " << piece << ")";
  }
  for (int e = 0; e < kernels::kDecodePieceTraceEvents; ++e)
    EXPECT_FALSE(std::string(kernels::decode_piece_trace_event(e)).empty());
  EXPECT_GE(first_cta_pairs, 4) << "CTA (0, 0) should record several pairs of its first piece";
  for (int group = 0; group < 2; ++group)
    for (int event = 0; event < kEvents; ++event)
      EXPECT_FALSE(std::string(kernels::decode_pair_trace_event(group, event)).empty());

  KernelChoice pv_first = pairs;
  pv_first.schedule = MlaDecodeSchedule::kSeesawPvFirst;
  EXPECT_THROW(run_decode(gpu, pv_first, nullptr, trace.data()), mla::Error);
}

}  // namespace mla
