// Random paged MLA decode problems; see paged_problem.h.
#include "ref/paged_problem.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"

namespace mla::ref {
namespace {

constexpr int kPage = 64;
constexpr int kDimQK = 576;

void fill_normal(std::vector<bf16>& values, float stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, stddev);
  for (bf16& value : values)
    value = float_to_bf16(std::clamp(normal(rng), -4.f * stddev, 4.f * stddev));
}

}  // namespace

PagedDecodeProblem make_paged_decode_problem(const PagedDecodeProblemSpec& spec) {
  MLA_CHECK(spec.num_heads_kv >= 1 && spec.num_heads_q % spec.num_heads_kv == 0);
  PagedDecodeProblem problem;
  problem.spec = spec;
  problem.batch = static_cast<int>(spec.seqlens.size());
  problem.seqlens = spec.seqlens;
  std::mt19937_64 rng(spec.seed);

  int max_pages = 0;
  int used_pages = 0;
  for (int32_t seqlen : spec.seqlens) {
    const int pages = (std::max(seqlen, 0) + kPage - 1) / kPage;
    max_pages = std::max(max_pages, pages);
    used_pages += pages;
  }
  problem.max_pages_per_seq = max_pages + spec.extra_block_table_columns;
  MLA_CHECK_GE(problem.max_pages_per_seq, 1);
  problem.num_pages = used_pages + spec.spare_pages;
  MLA_CHECK_GE(problem.num_pages, 1);

  // Hand the pages out in a random order; unused entries get the sentinel.
  std::vector<int32_t> order(problem.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  problem.block_table.assign(size_t(problem.batch) * problem.max_pages_per_seq,
                             kUnusedPageSentinel);
  int next = 0;
  for (int b = 0; b < problem.batch; ++b) {
    const int pages = (std::max(spec.seqlens[b], 0) + kPage - 1) / kPage;
    for (int j = 0; j < pages; ++j)
      problem.block_table[size_t(b) * problem.max_pages_per_seq + j] = order[next++];
  }

  const int h_kv = spec.num_heads_kv;
  problem.q.resize(size_t(problem.batch) * spec.seqlen_q * spec.num_heads_q * kDimQK);
  fill_normal(problem.q, spec.q_stddev, rng);

  // Whole cache NaN, then the owned slots random.
  const bf16 nan_value = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  problem.kv_cache.assign(size_t(problem.num_pages) * kPage * h_kv * kDimQK, nan_value);
  std::normal_distribution<float> normal(0.f, spec.kv_stddev);
  for (int b = 0; b < problem.batch; ++b) {
    for (int t = 0; t < spec.seqlens[b]; ++t) {
      const int64_t page = problem.block_table[size_t(b) * problem.max_pages_per_seq + t / kPage];
      bf16* slot = problem.kv_cache.data() + (page * kPage + t % kPage) * h_kv * kDimQK;
      for (int i = 0; i < h_kv * kDimQK; ++i)
        slot[i] =
            float_to_bf16(std::clamp(normal(rng), -4.f * spec.kv_stddev, 4.f * spec.kv_stddev));
    }
  }
  return problem;
}

MlaDecodeInputs<bf16> ref_inputs(const PagedDecodeProblem& problem) {
  MlaDecodeInputs<bf16> inputs;
  inputs.batch = problem.batch;
  inputs.seqlen_q = problem.spec.seqlen_q;
  inputs.num_heads_q = problem.spec.num_heads_q;
  inputs.num_heads_kv = problem.spec.num_heads_kv;
  inputs.num_pages = problem.num_pages;
  inputs.max_pages_per_seq = problem.max_pages_per_seq;
  inputs.softmax_scale = problem.spec.softmax_scale;
  inputs.causal = problem.spec.causal;
  inputs.q = problem.q.data();
  inputs.kv_cache = problem.kv_cache.data();
  inputs.block_table = problem.block_table.data();
  inputs.seqlens = problem.seqlens.data();
  return inputs;
}

}  // namespace mla::ref
