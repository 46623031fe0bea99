// The GPU sampler against its CPU twin (ref::sample_row) on adversarial rows: many exact ties,
// -inf entries, -0/+0, padded row strides with NaN in the padding, repeated and out-of-range
// context ids, prompt lengths beyond the context, a workspace full of garbage. rows 1, 7, 256 at
// vocab 256, 32000, 102400 (DeepSeek-V2-Lite) and 129280 (DeepSeek-V3); each parameter alone and
// combined. The twin shares every deciding operation (sampling_math.h), so tokens and top ids
// must be identical (any mismatch is counted and reported: the allowed count is 0);
// log-probabilities agree within 1e-5 (fp32 log-softmax against the twin's double). Also:
// determinism, a new draw per step, a CUDA graph replayed with new steps, and 20,000 draws whose
// frequencies match the twin's distribution.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/sampling.h"
#include "ref/sampling_ref.h"

namespace mla {
namespace {

using kernels::kSamplingMaxLogprobs;
using kernels::SamplingRowParams;
constexpr float kInf = std::numeric_limits<float>::infinity();
// fp32 log-softmax over up to 129280 logits against the twin's double: the fp32 sum's relative
// error (~1e-6) and the final fp32 subtraction (logprobs down to about -40: ulp 4e-6).
constexpr double kLogprobTolerance = 1e-5;

struct Problem {
  int64_t rows = 0, vocab = 0, stride = 0;
  std::vector<float> logits;  // [rows, stride], NaN in the padding
  std::vector<SamplingRowParams> params;
  std::vector<int32_t> context;
  std::vector<int64_t> offsets;  // [rows + 1]
  std::vector<int32_t> prompt_lengths;
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprob;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// Row styles: continuous, quantised (many exact ties), with -inf, peaked, signed zeros.
void fill_row(float* row, int64_t vocab, int style, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int> level(-8, 8);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int64_t i = 0; i < vocab; ++i) {
    switch (style % 5) {
      case 0:
        row[i] = normal(rng);
        break;
      case 1:
        row[i] = 0.5f * float(level(rng));
        break;
      case 2:
        row[i] = unit(rng) < 0.3f ? -kInf : normal(rng);
        break;
      case 3:
        row[i] = normal(rng) * 0.25f;
        break;
      default:
        row[i] = unit(rng) < 0.5f ? (unit(rng) < 0.5f ? -0.0f : 0.0f) : 0.25f * level(rng);
    }
  }
  if (style % 5 == 3) row[rng() % vocab] = 6.0f;  // one clear favourite
  if (style % 5 == 1) {
    const float top = 4.0f;  // several tokens share the maximum
    for (int k = 0; k < 5; ++k) row[rng() % vocab] = top;
  }
}

// Named parameter sets: each alone, then combined.
std::vector<std::pair<std::string, SamplingRowParams>> configs(int64_t vocab) {
  std::vector<std::pair<std::string, SamplingRowParams>> c;
  auto add = [&](std::string name, auto edit) {
    SamplingRowParams p;
    edit(p);
    c.emplace_back(std::move(name), p);
  };
  add("greedy", [](SamplingRowParams& p) { p.temperature = 0.0f; });
  add("greedy+penalties", [](SamplingRowParams& p) {
    p.temperature = 0.0f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.4f;
  });
  add("T=1", [](SamplingRowParams&) {});
  add("T=0.6", [](SamplingRowParams& p) { p.temperature = 0.6f; });
  add("T=1e-3", [](SamplingRowParams& p) { p.temperature = 1e-3f; });
  add("T=1.7", [](SamplingRowParams& p) { p.temperature = 1.7f; });
  add("top_k=1", [](SamplingRowParams& p) { p.top_k = 1; });
  add("top_k=5", [](SamplingRowParams& p) { p.top_k = 5; });
  add("top_k=50", [](SamplingRowParams& p) { p.top_k = 50; });
  add("top_k=vocab-1",
      [&](SamplingRowParams& p) { p.top_k = int32_t(std::max<int64_t>(1, vocab - 1)); });
  add("top_k>vocab", [&](SamplingRowParams& p) { p.top_k = int32_t(vocab + 3); });
  add("top_p=0.9", [](SamplingRowParams& p) { p.top_p = 0.9f; });
  add("top_p=0.3", [](SamplingRowParams& p) { p.top_p = 0.3f; });
  add("top_p=0.999", [](SamplingRowParams& p) { p.top_p = 0.999f; });
  add("min_p=0.1", [](SamplingRowParams& p) { p.min_p = 0.1f; });
  add("min_p=0.9", [](SamplingRowParams& p) { p.min_p = 0.9f; });
  add("repetition=1.5", [](SamplingRowParams& p) { p.repetition_penalty = 1.5f; });
  add("repetition=0.6", [](SamplingRowParams& p) { p.repetition_penalty = 0.6f; });
  add("presence+frequency", [](SamplingRowParams& p) {
    p.presence_penalty = 2.0f;
    p.frequency_penalty = -1.0f;
  });
  add("combined", [](SamplingRowParams& p) {
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.2f;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
  });
  add("combined-wide", [](SamplingRowParams& p) {
    p.temperature = 1.3f;
    p.top_k = 1000;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repetition_penalty = 0.9f;
    p.frequency_penalty = -0.5f;
  });
  return c;
}

// Context: prompt then generated ids, drawn from a few ids (duplicates) near the row's favourites,
// plus ids outside [0, vocab) that must be ignored.
void add_context(Problem& pr, int64_t row, std::mt19937& rng) {
  const float* logits = pr.logits.data() + row * pr.stride;
  std::vector<int32_t> favourites;
  int32_t best = 0;
  for (int64_t i = 0; i < pr.vocab; ++i)
    if (logits[i] > logits[best]) best = int32_t(i);
  favourites.push_back(best);
  for (int k = 0; k < 8; ++k) favourites.push_back(int32_t(rng() % pr.vocab));
  const int length = int(rng() % 300);
  for (int j = 0; j < length; ++j) {
    const uint32_t pick = rng() % 50;
    pr.context.push_back(pick == 0   ? -1
                         : pick == 1 ? int32_t(pr.vocab + 5)
                                     : favourites[pick % favourites.size()]);
  }
  pr.offsets.push_back(int64_t(pr.context.size()));
  pr.prompt_lengths.push_back(rng() % 7 == 0 ? length + 10 : int32_t(rng() % (length + 1)));
}

Problem make_problem(int64_t rows, int64_t vocab, uint32_t seed,
                     const std::vector<SamplingRowParams>& row_params) {
  std::mt19937 rng(seed);
  Problem pr;
  pr.rows = rows;
  pr.vocab = vocab;
  pr.stride = vocab + 5;
  pr.logits.assign(size_t(rows * pr.stride), std::nanf(""));
  pr.offsets.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    fill_row(pr.logits.data() + r * pr.stride, vocab, int(rng() % 5), rng);
    add_context(pr, r, rng);
    SamplingRowParams p = row_params[r % row_params.size()];
    p.seed = (uint64_t(rng()) << 32) | rng();
    p.step = rng() % 1000;
    p.num_logprobs = std::array{-1, 0, 1, 5, 20}[(r + seed) % 5];
    pr.params.push_back(p);
  }
  return pr;
}

class GpuSampler {
 public:
  explicit GpuSampler(const Problem& pr)
      : pr_(pr),
        logits_(pr.logits.size()),
        params_(pr.params.size()),
        context_(std::max<size_t>(1, pr.context.size())),
        offsets_(pr.offsets.size()),
        prompt_lengths_(pr.prompt_lengths.size()),
        tokens_(pr.rows),
        logprob_(pr.rows),
        top_ids_(pr.rows * kSamplingMaxLogprobs),
        top_logprobs_(pr.rows * kSamplingMaxLogprobs),
        workspace_(kernels::sampling_workspace_size(pr.rows, pr.vocab)) {
    logits_.copy_from_host(pr.logits);
    params_.copy_from_host(pr.params);
    if (!pr.context.empty()) context_.copy_from_host(pr.context);
    offsets_.copy_from_host(pr.offsets);
    prompt_lengths_.copy_from_host(pr.prompt_lengths);
    // Garbage in the workspace: the kernel must not rely on zeroed counts.
    if (workspace_.bytes() > 0)
      MLA_CUDA_CHECK(cudaMemset(workspace_.data(), 0xa5, workspace_.bytes()));
  }

  kernels::SamplingParams params() {
    kernels::SamplingParams p;
    p.rows = pr_.rows;
    p.vocab = pr_.vocab;
    p.logits = logits_.data();
    p.logits_row_stride = pr_.stride;
    p.row_params = params_.data();
    p.context_tokens = context_.data();
    p.context_offsets = offsets_.data();
    p.prompt_lengths = prompt_lengths_.data();
    p.out_tokens = tokens_.data();
    p.out_logprob = logprob_.data();
    p.out_top_ids = top_ids_.data();
    p.out_top_logprobs = top_logprobs_.data();
    p.workspace = workspace_.data();
    p.workspace_bytes = workspace_.bytes();
    return p;
  }

  void poison_outputs() {
    if (pr_.rows == 0) return;
    MLA_CUDA_CHECK(cudaMemset(tokens_.data(), 0xff, tokens_.bytes()));
    MLA_CUDA_CHECK(cudaMemset(logprob_.data(), 0xff, logprob_.bytes()));  // NaN
    MLA_CUDA_CHECK(cudaMemset(top_ids_.data(), 0x7f, top_ids_.bytes()));
    MLA_CUDA_CHECK(cudaMemset(top_logprobs_.data(), 0xff, top_logprobs_.bytes()));
  }

  Result run(cudaStream_t stream = nullptr) {
    poison_outputs();
    kernels::launch_sampling(params(), stream);
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return fetch();
  }

  Result fetch() {
    return {tokens_.to_host(), logprob_.to_host(), top_ids_.to_host(), top_logprobs_.to_host()};
  }

  void set_row_params(const std::vector<SamplingRowParams>& params) {
    params_.copy_from_host(params);
  }

 private:
  const Problem& pr_;
  cuda::DeviceBuffer<float> logits_;
  cuda::DeviceBuffer<SamplingRowParams> params_;
  cuda::DeviceBuffer<int32_t> context_;
  cuda::DeviceBuffer<int64_t> offsets_;
  cuda::DeviceBuffer<int32_t> prompt_lengths_;
  cuda::DeviceBuffer<int32_t> tokens_;
  cuda::DeviceBuffer<float> logprob_;
  cuda::DeviceBuffer<int32_t> top_ids_;
  cuda::DeviceBuffer<float> top_logprobs_;
  cuda::DeviceBuffer<uint8_t> workspace_;
};

bool close(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);  // all -inf
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(double(got) - want) <= kLogprobTolerance;
}

struct Mismatches {
  int tokens = 0, logprobs = 0, top = 0;
};

// Compares every row with the twin; prints the first few differences.
Mismatches compare_with_twin(const Problem& pr, const Result& got, const std::string& label,
                             const std::vector<SamplingRowParams>* params_override = nullptr) {
  const std::vector<SamplingRowParams>& params = params_override ? *params_override : pr.params;
  Mismatches m;
  int printed = 0;
  for (int64_t r = 0; r < pr.rows; ++r) {
    const std::span<const float> logits(pr.logits.data() + r * pr.stride, size_t(pr.vocab));
    const std::span<const int32_t> context(pr.context.data() + pr.offsets[r],
                                           size_t(pr.offsets[r + 1] - pr.offsets[r]));
    ref::SampledLogprobs want_logprobs;
    const int32_t want =
        ref::sample_row(logits, params[r], context, pr.prompt_lengths[r], &want_logprobs);
    if (got.tokens[r] != want) {
      ++m.tokens;
      if (printed++ < 5)
        ADD_FAILURE() << label << " row " << r << ": token " << got.tokens[r] << ", twin " << want;
    }
    const int n = params[r].num_logprobs;
    if (n < 0) continue;
    if (!close(got.logprob[r], want_logprobs.logprob)) {
      ++m.logprobs;
      if (printed++ < 5)
        ADD_FAILURE() << label << " row " << r << ": logprob " << got.logprob[r] << ", twin "
                      << want_logprobs.logprob;
    }
    for (int k = 0; k < kSamplingMaxLogprobs; ++k) {
      const int32_t id = got.top_ids[r * kSamplingMaxLogprobs + k];
      const float lp = got.top_logprobs[r * kSamplingMaxLogprobs + k];
      const bool in_top = k < int(want_logprobs.top.size());
      const int32_t want_id = in_top ? want_logprobs.top[k].first : -1;
      const float want_lp = in_top ? want_logprobs.top[k].second : -kInf;
      if (id != want_id || !close(lp, want_lp)) {
        ++m.top;
        if (printed++ < 5)
          ADD_FAILURE() << label << " row " << r << " top[" << k << "]: (" << id << ", " << lp
                        << "), twin (" << want_id << ", " << want_lp << ")";
      }
    }
  }
  return m;
}

void expect_matches(const Problem& pr, const Result& got, const std::string& label) {
  const Mismatches m = compare_with_twin(pr, got, label);
  EXPECT_EQ(m.tokens, 0) << label << ": tokens differing from the twin (near-ties included)";
  EXPECT_EQ(m.logprobs, 0) << label;
  EXPECT_EQ(m.top, 0) << label;
}

struct Shape {
  int64_t rows, vocab;
};

class SamplingGpu : public ::testing::TestWithParam<Shape> {};

TEST_P(SamplingGpu, MatchesTwinForEachParameterAloneAndCombined) {
  MLA_REQUIRE_SM90_GPU();
  const Shape shape = GetParam();
  const auto named = configs(shape.vocab);
  if (shape.rows <= 7) {
    // One launch per parameter set, every row with it.
    for (size_t c = 0; c < named.size(); ++c) {
      const Problem pr =
          make_problem(shape.rows, shape.vocab, uint32_t(100 + c), {named[c].second});
      GpuSampler gpu(pr);
      expect_matches(pr, gpu.run(), named[c].first);
    }
  }
  // All sets at once, row r with set r mod count.
  std::vector<SamplingRowParams> all;
  for (const auto& [name, p] : named) all.push_back(p);
  const Problem pr = make_problem(shape.rows, shape.vocab, 7, all);
  GpuSampler gpu(pr);
  const Result first = gpu.run();
  expect_matches(pr, first, "mixed");
  // Same inputs: bit-identical.
  const Result again = gpu.run();
  EXPECT_EQ(first.tokens, again.tokens);
  EXPECT_EQ(0, std::memcmp(first.logprob.data(), again.logprob.data(), first.logprob.size() * 4));
  EXPECT_EQ(first.top_ids, again.top_ids);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SamplingGpu,
                         ::testing::Values(Shape{1, 256}, Shape{7, 256}, Shape{256, 256},
                                           Shape{1, 32000}, Shape{7, 32000}, Shape{256, 32000},
                                           Shape{1, 102400}, Shape{7, 102400}, Shape{256, 102400},
                                           Shape{1, 129280}, Shape{7, 129280}, Shape{256, 129280}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "rows" + std::to_string(info.param.rows) + "_vocab" +
                                  std::to_string(info.param.vocab);
                         });

TEST(SamplingGpuEdges, TinyVocabsAllMinusInfAndZeroRows) {
  MLA_REQUIRE_SM90_GPU();
  for (int64_t vocab : {1, 2, 3, 17, 1023, 1025}) {
    const auto named = configs(vocab);
    std::vector<SamplingRowParams> all;
    for (const auto& [name, p] : named) all.push_back(p);
    Problem pr = make_problem(int64_t(all.size()), vocab, uint32_t(vocab), all);
    for (int64_t i = 0; i < vocab; ++i) pr.logits[i] = -kInf;  // row 0: every logit -inf
    GpuSampler gpu(pr);
    expect_matches(pr, gpu.run(), "vocab " + std::to_string(vocab));
  }
  kernels::SamplingParams none;
  none.vocab = 10;
  EXPECT_NO_THROW(kernels::launch_sampling(none, nullptr));
}

TEST(SamplingGpuDeterminism, NewStepNewDrawAndGraphReplay) {
  MLA_REQUIRE_SM90_GPU();
  SamplingRowParams flat;  // T = 1 on near-flat logits: draws vary from step to step
  flat.temperature = 1.0f;
  Problem pr = make_problem(64, 32000, 21, {flat});
  for (float& x : pr.logits)
    if (!std::isnan(x)) x = std::clamp(x, -1.0f, 1.0f);
  GpuSampler gpu(pr);
  const Result first = gpu.run();
  expect_matches(pr, first, "step 0");

  // Captured once, replayed with new steps copied into the same row_params buffer.
  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  kernels::launch_sampling(gpu.params(), stream);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<SamplingRowParams> params = pr.params;
  int changed = 0;
  for (int replay = 1; replay <= 3; ++replay) {
    for (SamplingRowParams& p : params) p.step += 1;
    gpu.set_row_params(params);
    gpu.poison_outputs();
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const Result got = gpu.fetch();
    const Mismatches m = compare_with_twin(pr, got, "replay " + std::to_string(replay), &params);
    EXPECT_EQ(m.tokens + m.logprobs + m.top, 0);
    for (int64_t r = 0; r < pr.rows; ++r) changed += got.tokens[r] != first.tokens[r];
  }
  EXPECT_GT(changed, 3 * 64 * 9 / 10) << "a new step should give a new draw on near-flat rows";
  MLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MLA_CUDA_CHECK(cudaGraphDestroy(graph));
  MLA_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(SamplingGpuDistribution, TwentyThousandDrawsFollowTheTwinsDistribution) {
  MLA_REQUIRE_SM90_GPU();
  const std::vector<float> row = {1.0f,  0.25f, 2.0f,  1.0f,  -kInf, 0.25f,
                                  -0.5f, 1.0f,  -1.5f, 0.75f, 1.75f};
  SamplingRowParams p;
  p.temperature = 0.9f;
  p.top_k = 8;
  p.top_p = 0.93f;
  p.min_p = 0.04f;
  p.seed = 4242;
  constexpr int kDraws = 20000;
  Problem pr = make_problem(kDraws, int64_t(row.size()), 5, {p});
  for (int64_t r = 0; r < kDraws; ++r) {
    std::copy(row.begin(), row.end(), pr.logits.begin() + r * pr.stride);
    pr.params[r].seed = p.seed;
    pr.params[r].step = uint64_t(r);
  }
  std::fill(pr.context.begin(), pr.context.end(), -1);  // no penalties apply
  GpuSampler gpu(pr);
  const Result got = gpu.run();
  expect_matches(pr, got, "draws");
  const std::vector<double> want = ref::sample_row_distribution(row, p, {}, 0);
  std::vector<int> counts(row.size(), 0);
  for (int32_t token : got.tokens) ++counts[token];
  double chi2 = 0.0;
  for (size_t i = 0; i < row.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is never kept";
      continue;
    }
    const double e = want[i] * kDraws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, 47.0) << "chi-square over <= 10 degrees of freedom, p = 1e-6";
}

TEST(SamplingGpuTiming, ReportsMicrosecondsPerLaunch) {
  MLA_REQUIRE_SM90_GPU();
  for (const Shape shape : {Shape{1, 129280}, Shape{64, 129280}, Shape{256, 129280}}) {
    for (const char* which : {"greedy", "T=1", "top_k=50", "combined", "top_p=0.9"}) {
      for (const int logprobs : {-1, 5}) {
        SamplingRowParams p;
        for (const auto& [name, q] : configs(shape.vocab))
          if (name == which) p = q;
        Problem pr = make_problem(shape.rows, shape.vocab, 3, {p});
        for (SamplingRowParams& row : pr.params) row.num_logprobs = logprobs;
        GpuSampler gpu(pr);
        const kernels::SamplingParams params = gpu.params();
        // Timed as a CUDA graph of kRuns launches (host launch latency excluded), after replays
        // that bring the clocks up.
        constexpr int kRuns = 20;
        cudaStream_t stream;
        MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        cudaGraph_t graph;
        MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kRuns; ++i) kernels::launch_sampling(params, stream);
        MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec;
        MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 10; ++i) MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        cudaEvent_t start, stop;
        MLA_CUDA_CHECK(cudaEventCreate(&start));
        MLA_CUDA_CHECK(cudaEventCreate(&stop));
        MLA_CUDA_CHECK(cudaEventRecord(start, stream));
        MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        MLA_CUDA_CHECK(cudaEventRecord(stop, stream));
        MLA_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        MLA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        std::printf("sampling rows %lld vocab %lld %-10s logprobs %2d: %8.1f us\n",
                    (long long)shape.rows, (long long)shape.vocab, which, logprobs,
                    1000.0 * ms / kRuns);
        MLA_CUDA_CHECK(cudaEventDestroy(start));
        MLA_CUDA_CHECK(cudaEventDestroy(stop));
        MLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
        MLA_CUDA_CHECK(cudaGraphDestroy(graph));
        MLA_CUDA_CHECK(cudaStreamDestroy(stream));
      }
    }
  }
}

}  // namespace
}  // namespace mla
