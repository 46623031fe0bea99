// Random paged MLA decode problems (host data) for tests, the demo and the benchmark.
//
// Adversarial by construction: pages are handed out in a random permutation, every cache slot no
// sequence owns is NaN (whole spare pages and the tail of each last page), and unused block-table
// entries hold a huge sentinel page id, so a kernel that reads anything it should not fails loudly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtypes.h"
#include "ref/mla_decode_ref.h"

namespace mla::ref {

inline constexpr int32_t kUnusedPageSentinel = 0x3fffffff;

struct PagedDecodeProblemSpec {
  int seqlen_q = 1;
  int num_heads_q = 16;
  int num_heads_kv = 1;
  bool causal = true;
  float softmax_scale = 0.1147213867929261f;  // DeepSeek-V2-Lite: 192^-0.5 · mscale²
  std::vector<int32_t> seqlens;               // one per sequence (batch = size)
  int extra_block_table_columns = 1;          // unused columns per row (hold the sentinel)
  int spare_pages = 3;                        // pages nobody owns (all NaN)
  float q_stddev = 1.0f;                      // values ~ N(0, stddev) clipped to ±4·stddev
  float kv_stddev = 1.0f;
  uint64_t seed = 1;
};

struct PagedDecodeProblem {
  PagedDecodeProblemSpec spec;
  int batch = 0;
  int num_pages = 0;
  int max_pages_per_seq = 0;
  std::vector<int32_t> seqlens;      // [b]
  std::vector<int32_t> block_table;  // [b, max_pages_per_seq]
  std::vector<bf16> q;               // [b, s_q, h_q, 576]
  std::vector<bf16> kv_cache;        // [num_pages, 64, h_kv, 576]
};

PagedDecodeProblem make_paged_decode_problem(const PagedDecodeProblemSpec& spec);

MlaDecodeInputs<bf16> ref_inputs(const PagedDecodeProblem& problem);

}  // namespace mla::ref
