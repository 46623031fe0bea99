// Dense attention with LSE; see attention.h.
#include "ref/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mla::ref {

void attention(const AttentionArgs& args) {
  // Parallel only when there is enough work (see ops.cpp).
  const bool parallel =
      args.q_count * args.heads * args.k_count * (args.head_dim_qk + args.head_dim_v) >= (1 << 20);
#pragma omp parallel for collapse(2) schedule(dynamic, 4) if (parallel)
  for (int64_t i = 0; i < args.q_count; ++i) {
    for (int64_t h = 0; h < args.heads; ++h) {
      const int64_t visible =
          args.causal ? std::min(args.k_count, args.k_count - args.q_count + i + 1) : args.k_count;
      float* out = args.out + i * args.out_token_stride + h * args.out_head_stride;
      float* lse = args.lse + i * args.lse_token_stride + h;
      if (visible <= 0) {
        std::fill(out, out + args.head_dim_v, 0.f);
        *lse = -std::numeric_limits<float>::infinity();
        continue;
      }
      const float* q = args.q + i * args.q_token_stride + h * args.q_head_stride;
      std::vector<double> scores(static_cast<size_t>(visible));
      double max_score = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        const float* k = args.k + j * args.k_token_stride + h * args.k_head_stride;
        double dot = 0.0;
        for (int64_t d = 0; d < args.head_dim_qk; ++d) dot += double(q[d]) * k[d];
        scores[j] = dot * args.softmax_scale;
        max_score = std::max(max_score, scores[j]);
      }
      std::vector<double> sums(static_cast<size_t>(args.head_dim_v), 0.0);
      double total = 0.0;
      for (int64_t j = 0; j < visible; ++j) {
        const double weight = std::exp(scores[j] - max_score);
        total += weight;
        const float* v = args.v + j * args.v_token_stride + h * args.v_head_stride;
        for (int64_t d = 0; d < args.head_dim_v; ++d) sums[d] += weight * v[d];
      }
      for (int64_t d = 0; d < args.head_dim_v; ++d) out[d] = static_cast<float>(sums[d] / total);
      *lse = static_cast<float>(max_score + std::log(total));
    }
  }
}

}  // namespace mla::ref
