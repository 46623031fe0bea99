// CPU reference of the MLA decode op; see mla_decode_ref.h.
#include "ref/mla_decode_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"

namespace mla::ref {
namespace {

inline float to_float(float value) {
  return value;
}
inline float to_float(bf16 value) {
  return bf16_to_float(value);
}

}  // namespace

template <typename T>
void mla_decode(const MlaDecodeInputs<T>& in, float* out, float* lse) {
  MLA_CHECK(in.num_heads_kv >= 1 && in.num_heads_q % in.num_heads_kv == 0);
  MLA_CHECK(in.head_dim_v <= in.head_dim_qk);
  const int d_qk = in.head_dim_qk;
  const int d_v = in.head_dim_v;
  const int heads_per_kv = in.num_heads_q / in.num_heads_kv;
  const int capacity = in.max_pages_per_seq * in.page_size;

  std::vector<float> keys;  // [L, d_qk] of one (sequence, kv head)
  for (int b = 0; b < in.batch; ++b) {
    const int seqlen = std::clamp(in.seqlens[b], 0, capacity);
    for (int kv_head = 0; kv_head < in.num_heads_kv; ++kv_head) {
      keys.assign(static_cast<size_t>(seqlen) * d_qk, 0.f);
      for (int t = 0; t < seqlen; ++t) {
        const int64_t page = in.block_table[int64_t(b) * in.max_pages_per_seq + t / in.page_size];
        if (page < 0 || page >= in.num_pages)
          throw_error(
              "mla_decode (ref): block_table[{}][{}] = {} is not a page of the cache (0..{})", b,
              t / in.page_size, page, in.num_pages - 1);
        const T* src =
            in.kv_cache +
            ((page * in.page_size + t % in.page_size) * in.num_heads_kv + kv_head) * d_qk;
        for (int d = 0; d < d_qk; ++d) keys[size_t(t) * d_qk + d] = to_float(src[d]);
      }
      const int num_rows = in.seqlen_q * heads_per_kv;
      // Threads only pay off above about a million multiply-adds (one token of a tiny model's
      // decode is far below, and spinning threads then cost more than the work).
      const bool parallel = int64_t(num_rows) * seqlen * (d_qk + d_v) >= (int64_t(1) << 20);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
      for (int row = 0; row < num_rows; ++row) {
        const int s = row / heads_per_kv;
        const int head = kv_head * heads_per_kv + row % heads_per_kv;
        const int visible = in.causal ? seqlen - (in.seqlen_q - 1 - s) : seqlen;
        float* out_row = out + ((int64_t(b) * in.seqlen_q + s) * in.num_heads_q + head) * d_v;
        float* lse_out = lse + (int64_t(b) * in.num_heads_q + head) * in.seqlen_q + s;
        if (visible <= 0) {
          std::fill(out_row, out_row + d_v, 0.f);
          *lse_out = std::numeric_limits<float>::infinity();
          continue;
        }
        const T* q_row = in.q + ((int64_t(b) * in.seqlen_q + s) * in.num_heads_q + head) * d_qk;
        std::vector<double> q_values(d_qk);
        for (int d = 0; d < d_qk; ++d) q_values[d] = to_float(q_row[d]);
        std::vector<double> scores(visible);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int t = 0; t < visible; ++t) {
          const float* key = keys.data() + size_t(t) * d_qk;
          double dot = 0.0;
          for (int d = 0; d < d_qk; ++d) dot += q_values[d] * key[d];
          scores[t] = dot * in.softmax_scale;
          max_score = std::max(max_score, scores[t]);
        }
        double sum = 0.0;
        std::vector<double> acc(d_v, 0.0);
        for (int t = 0; t < visible; ++t) {
          const double weight = std::exp(scores[t] - max_score);
          sum += weight;
          const float* value = keys.data() + size_t(t) * d_qk;
          for (int d = 0; d < d_v; ++d) acc[d] += weight * value[d];
        }
        for (int d = 0; d < d_v; ++d) out_row[d] = static_cast<float>(acc[d] / sum);
        *lse_out = static_cast<float>(max_score + std::log(sum));
      }
    }
  }
}

template void mla_decode<float>(const MlaDecodeInputs<float>&, float*, float*);
template void mla_decode<bf16>(const MlaDecodeInputs<bf16>&, float*, float*);

}  // namespace mla::ref
