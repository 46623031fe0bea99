// The prefill attention (MLA's materialised path, d_qk 192 / d_v 128) on the GPU against
// ref::attention, span by span, on inputs rounded to bf16 first. Adversarial on purpose: spans
// in shuffled order with uncovered q rows between them, NaN in every q/k/v row and padding element
// the kernel must not read, out and lse poisoned with NaN (every element must be written; padding
// of out must stay untouched), q_count not a multiple of 64, k_count 0, causal with k_count <
// q_count (top rows see no key), 8k-token spans, many small spans, heads 1..128, strided views
// (v inside a [rows, heads, 256] kv tensor, k with head stride 0), flat as well as peaked
// softmaxes, and both CTA shapes (64- and 128-row tiles).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/prefill_attention.h"
#include "ref/attention.h"

namespace mla {
namespace {

using kernels::AttentionSpanDevice;
using kernels::PrefillAttentionParams;

// out: bf16 output (relative rounding 2^-9) of a weighted mean whose weights P enter the P·V
// product as bf16 (2^-9 each, uncorrelated, so they mostly average out): ~3e-3 in practice;
// 1e-2 leaves margin without hiding an indexing bug (which gives O(1) errors).
constexpr double kMaxRelativeL2 = 1e-2;
// lse: fp32 scores from exact bf16 inputs, fp32 sums and ex2.approx; errors ~1e-5 relative.
constexpr double kMaxLseRelative = 1e-3;

constexpr int kDqk = 192;
constexpr int kDv = 128;
constexpr float kScale = 0.135234f;  // DeepSeek-V3's 192^-0.5 · mscale²

struct SpanSpec {
  int q_count = 0;
  int k_count = 0;
  bool causal = false;
};

struct Case {
  std::string name;
  int heads = 1;
  std::vector<SpanSpec> spans;
  float sigma = 1.f;   // q, k ~ N(0, sigma): score std ≈ 1.87 · sigma²
  bool padded = true;  // padded q/out/lse strides (else contiguous)
  uint32_t seed = 1;
  bool shared_k = false;  // one key row for all heads (k_head_stride 0, as a shared k_pe would be)
};

const uint16_t kNanBits = 0x7fc0;

bf16 nan_bf16() {
  return bf16{kNanBits};
}

struct Problem {
  int heads = 0;
  int64_t q_rows = 0, k_rows = 0;
  std::vector<AttentionSpanDevice> spans;  // shuffled
  int max_q = 0;
  int64_t q_row_stride = 0, q_head_stride = 0;
  int64_t k_row_stride = 0, k_head_stride = 0;
  int64_t kv_row_stride = 0, kv_head_stride = 0;  // v = kv + 128
  int64_t out_row_stride = 0, out_head_stride = 0, lse_row_stride = 0;
  std::vector<bf16> q, k, kv;
};

Problem make_problem(const Case& c) {
  std::mt19937 rng(c.seed);
  Problem p;
  p.heads = c.heads;
  // Place the spans' q and k ranges in order with random uncovered gaps, then shuffle the list.
  std::uniform_int_distribution<int> gap(0, 5);
  int64_t q_cursor = gap(rng), k_cursor = gap(rng);
  for (const SpanSpec& s : c.spans) {
    p.spans.push_back({int32_t(q_cursor), s.q_count, int32_t(k_cursor), s.k_count, s.causal});
    q_cursor += s.q_count + gap(rng);
    k_cursor += s.k_count + gap(rng);
    p.max_q = std::max(p.max_q, s.q_count);
  }
  std::shuffle(p.spans.begin(), p.spans.end(), rng);
  p.q_rows = q_cursor;
  p.k_rows = k_cursor;
  const int pad = c.padded ? 8 : 0;
  p.q_head_stride = kDqk + pad;
  p.q_row_stride = c.heads * p.q_head_stride + 2 * pad;
  p.k_head_stride = c.shared_k ? 0 : kDqk;
  p.k_row_stride = c.shared_k ? kDqk + pad : int64_t(c.heads) * kDqk;
  p.kv_head_stride = 2 * kDv;
  p.kv_row_stride = int64_t(c.heads) * 2 * kDv;
  p.out_head_stride = kDv + pad;
  p.out_row_stride = c.heads * p.out_head_stride + pad;
  p.lse_row_stride = c.heads + (c.padded ? 3 : 0);

  // Everything NaN first; then random values in the rows and columns some span owns.
  p.q.assign(size_t(p.q_rows * p.q_row_stride), nan_bf16());
  p.k.assign(size_t(p.k_rows * p.k_row_stride), nan_bf16());
  p.kv.assign(size_t(p.k_rows * p.kv_row_stride), nan_bf16());
  std::normal_distribution<float> qk(0.f, c.sigma), value(0.f, 1.f);
  for (const AttentionSpanDevice& s : p.spans) {
    for (int64_t r = s.q_begin; r < s.q_begin + s.q_count; ++r)
      for (int h = 0; h < c.heads; ++h)
        for (int d = 0; d < kDqk; ++d)
          p.q[r * p.q_row_stride + h * p.q_head_stride + d] = float_to_bf16(qk(rng));
    for (int64_t r = s.k_begin; r < s.k_begin + s.k_count; ++r)
      for (int h = 0; h < c.heads; ++h) {
        for (int d = 0; d < kDqk; ++d)
          p.k[r * p.k_row_stride + h * p.k_head_stride + d] = float_to_bf16(qk(rng));
        for (int d = 0; d < kDv; ++d)
          p.kv[r * p.kv_row_stride + h * p.kv_head_stride + kDv + d] = float_to_bf16(value(rng));
      }
  }
  return p;
}

std::vector<float> to_float(const std::vector<bf16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_to_float(values[i]);
  return out;
}

struct Result {
  std::vector<float> out;  // [q_rows, heads, 128] compact
  std::vector<float> lse;  // [q_rows, heads] compact
};

Result run_reference(const Problem& p) {
  Result r;
  r.out.assign(size_t(p.q_rows * p.heads * kDv), 0.f);
  r.lse.assign(size_t(p.q_rows * p.heads), -std::numeric_limits<float>::infinity());
  const std::vector<float> q = to_float(p.q), k = to_float(p.k), kv = to_float(p.kv);
  for (const AttentionSpanDevice& s : p.spans) {
    ref::AttentionArgs a;
    a.q_count = s.q_count;
    a.k_count = s.k_count;
    a.heads = p.heads;
    a.head_dim_qk = kDqk;
    a.head_dim_v = kDv;
    a.causal = s.causal != 0;
    a.softmax_scale = kScale;
    a.q = q.data() + s.q_begin * p.q_row_stride;
    a.q_token_stride = p.q_row_stride;
    a.q_head_stride = p.q_head_stride;
    a.k = k.data() + int64_t(s.k_begin) * p.k_row_stride;
    a.k_token_stride = p.k_row_stride;
    a.k_head_stride = p.k_head_stride;
    a.v = kv.data() + int64_t(s.k_begin) * p.kv_row_stride + kDv;
    a.v_token_stride = p.kv_row_stride;
    a.v_head_stride = p.kv_head_stride;
    a.out = r.out.data() + int64_t(s.q_begin) * p.heads * kDv;
    a.out_token_stride = int64_t(p.heads) * kDv;
    a.out_head_stride = kDv;
    a.lse = r.lse.data() + int64_t(s.q_begin) * p.heads;
    a.lse_token_stride = p.heads;
    ref::attention(a);
  }
  return r;
}

// Device copies of one problem; run() poisons the outputs, launches and reads back.
struct GpuProblem {
  const Problem& p;
  cuda::DeviceBuffer<bf16> q, k, kv, out;
  cuda::DeviceBuffer<float> lse;
  cuda::DeviceBuffer<AttentionSpanDevice> spans;

  explicit GpuProblem(const Problem& problem)
      : p(problem),
        q(p.q.size()),
        k(std::max<size_t>(p.k.size(), 8)),
        kv(std::max<size_t>(p.kv.size(), 256)),
        out(size_t(p.q_rows * p.out_row_stride)),
        lse(size_t(p.q_rows * p.lse_row_stride)),
        spans(p.spans.size()) {
    q.copy_from_host(p.q);
    if (!p.k.empty()) k.copy_from_host(p.k);
    if (!p.kv.empty()) kv.copy_from_host(p.kv);
    if (!p.spans.empty()) spans.copy_from_host(p.spans);
  }

  PrefillAttentionParams params() const {
    PrefillAttentionParams a;
    a.num_q_rows = p.q_rows;
    a.num_k_rows = p.k_rows;
    a.num_heads = p.heads;
    a.softmax_scale = kScale;
    a.q = q.data();
    a.q_row_stride = p.q_row_stride;
    a.q_head_stride = p.q_head_stride;
    a.k = k.data();
    a.k_row_stride = p.k_row_stride;
    a.k_head_stride = p.k_head_stride;
    a.v = kv.data() + kDv;
    a.v_row_stride = p.kv_row_stride;
    a.v_head_stride = p.kv_head_stride;
    a.out = out.data();
    a.out_row_stride = p.out_row_stride;
    a.out_head_stride = p.out_head_stride;
    a.lse = lse.data();
    a.lse_row_stride = p.lse_row_stride;
    a.spans = spans.data();
    a.num_spans = int(p.spans.size());
    a.max_span_q_count = p.max_q;
    return a;
  }

  void poison(cudaStream_t stream) {
    // 0xff bytes: NaN in bf16 (0xffff) and in fp32 (0xffffffff).
    MLA_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
    MLA_CUDA_CHECK(cudaMemsetAsync(lse.data(), 0xff, lse.bytes(), stream));
  }

  // Raw device outputs (padded layouts).
  std::vector<bf16> raw_out() const { return out.to_host(); }
  std::vector<float> raw_lse() const { return lse.to_host(); }

  Result compact(const std::vector<bf16>& raw_out, const std::vector<float>& raw_lse) const {
    Result r;
    r.out.resize(size_t(p.q_rows * p.heads * kDv));
    r.lse.resize(size_t(p.q_rows * p.heads));
    for (int64_t row = 0; row < p.q_rows; ++row)
      for (int h = 0; h < p.heads; ++h) {
        for (int d = 0; d < kDv; ++d)
          r.out[(row * p.heads + h) * kDv + d] =
              bf16_to_float(raw_out[row * p.out_row_stride + h * p.out_head_stride + d]);
        r.lse[row * p.heads + h] = raw_lse[row * p.lse_row_stride + h];
      }
    return r;
  }
};

// Counts elements of out/lse outside the tensors' logical extent (padding) that were written.
size_t written_padding(const Problem& p, const std::vector<bf16>& raw_out,
                       const std::vector<float>& raw_lse) {
  size_t count = 0;
  for (int64_t row = 0; row < p.q_rows; ++row) {
    for (int64_t i = 0; i < p.out_row_stride; ++i) {
      const int64_t h = i / p.out_head_stride, d = i % p.out_head_stride;
      const bool logical = h < p.heads && d < kDv;
      if (!logical && raw_out[row * p.out_row_stride + i].bits != 0xffff) ++count;
    }
    for (int64_t i = p.heads; i < p.lse_row_stride; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &raw_lse[row * p.lse_row_stride + i], 4);
      if (bits != 0xffffffffu) ++count;
    }
  }
  return count;
}

std::string describe(const Case& c) {
  std::string spans;
  for (size_t i = 0; i < c.spans.size() && i < 6; ++i)
    spans += fmt::format(" {}x{}{}", c.spans[i].q_count, c.spans[i].k_count,
                         c.spans[i].causal ? "c" : "");
  if (c.spans.size() > 6) spans += fmt::format(" ... ({} spans)", c.spans.size());
  return fmt::format("{} (heads {}, sigma {}, spans{})", c.name, c.heads, c.sigma, spans);
}

// Runs the case with both CTA shapes (64- and 128-row tiles) against one reference.
void check_case(const Case& c) {
  const Problem p = make_problem(c);
  const Result want = run_reference(p);
  GpuProblem gpu(p);
  for (int tile_rows : {64, 128}) {
    const std::string label = fmt::format("{}, tile {}", describe(c), tile_rows);
    PrefillAttentionParams params = gpu.params();
    params.tile_rows = tile_rows;
    gpu.poison(nullptr);
    kernels::launch_prefill_attention(params, nullptr);
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<bf16> raw_out = gpu.raw_out();
    const std::vector<float> raw_lse = gpu.raw_lse();
    const Result got = gpu.compact(raw_out, raw_lse);

    const testing::Comparison cmp = testing::compare_decode(got.out, want.out, got.lse, want.lse);
    fmt::print("{}: out relative L2 {:.2e}, lse max error {:.2e}\n", label, cmp.relative_l2,
               cmp.max_lse_relative);
    EXPECT_EQ(cmp.nan_count, 0u) << label << ": NaN in out/lse (unwritten, or leaked from poison)";
    EXPECT_EQ(cmp.inf_mismatch, 0u) << label << ": lse -inf where the reference has none, or v.v.";
    EXPECT_LE(cmp.relative_l2, kMaxRelativeL2) << label;
    EXPECT_LE(cmp.max_lse_relative, kMaxLseRelative) << label;
    // Rows without keys (and uncovered rows) are exactly 0 / -inf.
    size_t not_empty = 0;
    for (size_t i = 0; i < want.lse.size(); ++i) {
      if (!std::isinf(want.lse[i])) continue;
      if (!(std::isinf(got.lse[i]) && got.lse[i] < 0)) ++not_empty;
      for (int d = 0; d < kDv; ++d)
        if (got.out[i * kDv + d] != 0.f) ++not_empty;
    }
    EXPECT_EQ(not_empty, 0u) << label << ": rows that see no key must be out 0, lse -inf";
    EXPECT_EQ(written_padding(p, raw_out, raw_lse), 0u) << label << ": wrote outside out/lse";

    // Same inputs again: bit-identical.
    gpu.poison(nullptr);
    kernels::launch_prefill_attention(params, nullptr);
    const std::vector<bf16> out_again = gpu.raw_out();
    EXPECT_EQ(0, std::memcmp(out_again.data(), raw_out.data(), raw_out.size() * sizeof(bf16)))
        << label << ": out differs between two runs";
    const std::vector<float> lse_again = gpu.raw_lse();
    EXPECT_EQ(0, std::memcmp(lse_again.data(), raw_lse.data(), raw_lse.size() * sizeof(float)))
        << label << ": lse differs between two runs";
  }
}

TEST(PrefillAttentionGpu, SingleSpansCausalAndNot) {
  MLA_REQUIRE_SM90_GPU();
  uint32_t seed = 10;
  for (int heads : {1, 3, 16}) {
    for (float sigma : {0.1f, 1.f, 2.5f}) {
      check_case({"causal self", heads, {{200, 200, true}}, sigma, true, seed++});
      check_case({"non-causal", heads, {{77, 1000, false}}, sigma, false, seed++});
      check_case({"causal over a prefix", heads, {{100, 1100, true}}, sigma, true, seed++});
      check_case({"tile multiples", heads, {{128, 192, true}}, sigma, true, seed++});
    }
  }
}

TEST(PrefillAttentionGpu, RowsThatSeeNoKey) {
  MLA_REQUIRE_SM90_GPU();
  // Causal with fewer keys than queries: the top q_count - k_count rows see nothing.
  check_case({"k < q causal", 4, {{130, 50, true}}, 1.f, true, 100});
  check_case({"k = q - 1 causal", 4, {{65, 64, true}}, 1.f, true, 101});
  check_case({"k 0", 4, {{70, 0, true}, {33, 0, false}, {5, 9, false}}, 1.f, true, 102});
  check_case({"one key", 2, {{1, 1, true}, {64, 1, false}}, 1.f, true, 103});
}

TEST(PrefillAttentionGpu, ManySmallSpans) {
  MLA_REQUIRE_SM90_GPU();
  std::mt19937 rng(7);
  for (int heads : {1, 16, 128}) {
    Case c{"many small spans", heads, {}, 1.5f, true, uint32_t(200 + heads)};
    std::uniform_int_distribution<int> q_len(1, 20), context(0, 120), coin(0, 1);
    for (int i = 0; i < 60; ++i) {
      const int q = q_len(rng);
      const bool causal = coin(rng);
      c.spans.push_back({q, causal ? q + context(rng) : context(rng), causal});
    }
    check_case(c);
  }
}

TEST(PrefillAttentionGpu, HeadCounts) {
  MLA_REQUIRE_SM90_GPU();
  for (int heads : {2, 5, 32, 64, 127, 128})
    check_case({"heads",
                heads,
                {{97, 97, true}, {40, 300, false}},
                1.f,
                heads % 2 == 0,
                uint32_t(300 + heads)});
}

TEST(PrefillAttentionGpu, LongSpans) {
  MLA_REQUIRE_SM90_GPU();
  check_case({"8k causal", 2, {{8200, 8200, true}}, 1.f, true, 400});
  check_case({"short q over 9k keys", 2, {{70, 9000, false}, {64, 9001, true}}, 2.f, true, 401});
  check_case({"ragged long and short",
              2,
              {{3000, 3000, true}, {5, 7, true}, {1000, 4000, true}},
              1.f,
              true,
              402});
}

TEST(PrefillAttentionGpu, KeysSharedByAllHeads) {
  MLA_REQUIRE_SM90_GPU();
  check_case({"k head stride 0", 16, {{150, 150, true}, {30, 400, false}}, 1.f, true, 450, true});
}

TEST(PrefillAttentionGpu, NoSpansFillsEveryRow) {
  MLA_REQUIRE_SM90_GPU();
  Case c{"no spans", 3, {}, 1.f, true, 500};
  Problem p = make_problem(c);
  p.q_rows = 100;  // rows exist, no span covers them
  p.q.assign(size_t(p.q_rows * p.q_row_stride), nan_bf16());
  GpuProblem gpu(p);
  gpu.poison(nullptr);
  kernels::launch_prefill_attention(gpu.params(), nullptr);
  const Result got = gpu.compact(gpu.raw_out(), gpu.raw_lse());
  for (float x : got.out) ASSERT_EQ(x, 0.f);
  for (float x : got.lse) ASSERT_TRUE(std::isinf(x) && x < 0);
}

TEST(PrefillAttentionGpu, CudaGraphCapture) {
  MLA_REQUIRE_SM90_GPU();
  Case c{"graph", 8, {{150, 150, true}, {20, 90, true}}, 1.f, true, 600};
  const Problem p = make_problem(c);
  const Result want = run_reference(p);
  GpuProblem gpu(p);
  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  kernels::launch_prefill_attention(gpu.params(), stream);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    gpu.poison(stream);
    MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const Result got = gpu.compact(gpu.raw_out(), gpu.raw_lse());
    const testing::Comparison cmp = testing::compare_decode(got.out, want.out, got.lse, want.lse);
    EXPECT_EQ(cmp.nan_count, 0u);
    EXPECT_LE(cmp.relative_l2, kMaxRelativeL2);
    EXPECT_LE(cmp.max_lse_relative, kMaxLseRelative);
  }
  MLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MLA_CUDA_CHECK(cudaGraphDestroy(graph));
  MLA_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mla
