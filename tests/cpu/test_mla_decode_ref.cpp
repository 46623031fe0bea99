// The CPU reference of the MLA decode op against a brute-force dense computation (long double,
// no paging, the causal rule written out), on adversarial paged layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "ref/mla_decode_ref.h"

namespace mla {
namespace {

constexpr int kDqk = 576;
constexpr int kDv = 512;
constexpr int kPage = 64;

struct DenseCase {
  int s_q, h_q, h_kv;
  bool causal;
  std::vector<int> seqlens;
};

// Dense data → paged cache with permuted pages and NaN everywhere a sequence does not own.
void run_case(const DenseCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.7f);
  const int b = static_cast<int>(c.seqlens.size());
  std::vector<std::vector<float>> dense_k(b);  // [L][h_kv][576] per sequence, bf16-rounded
  std::vector<float> q(size_t(b) * c.s_q * c.h_q * kDqk);
  for (float& v : q) v = round_to_bf16(normal(rng));
  int total_pages = 2;  // two spare pages
  int max_pages = 1;
  for (int i = 0; i < b; ++i) {
    dense_k[i].resize(size_t(c.seqlens[i]) * c.h_kv * kDqk);
    for (float& v : dense_k[i]) v = round_to_bf16(normal(rng));
    const int pages = (c.seqlens[i] + kPage - 1) / kPage;
    total_pages += pages;
    max_pages = std::max(max_pages, pages + 1);
  }
  std::vector<int32_t> order(total_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> block_table(size_t(b) * max_pages, 1 << 29);
  std::vector<bf16> cache(size_t(total_pages) * kPage * c.h_kv * kDqk,
                          float_to_bf16(std::numeric_limits<float>::quiet_NaN()));
  int next = 0;
  for (int i = 0; i < b; ++i) {
    for (int t = 0; t < c.seqlens[i]; ++t) {
      if (t % kPage == 0) block_table[size_t(i) * max_pages + t / kPage] = order[next++];
      const int64_t page = block_table[size_t(i) * max_pages + t / kPage];
      for (int g = 0; g < c.h_kv; ++g)
        for (int d = 0; d < kDqk; ++d)
          cache[((page * kPage + t % kPage) * c.h_kv + g) * kDqk + d] =
              float_to_bf16(dense_k[i][(size_t(t) * c.h_kv + g) * kDqk + d]);
    }
  }
  std::vector<bf16> q_bf16(q.size());
  for (size_t i = 0; i < q.size(); ++i) q_bf16[i] = float_to_bf16(q[i]);

  ref::MlaDecodeInputs<bf16> in;
  in.batch = b;
  in.seqlen_q = c.s_q;
  in.num_heads_q = c.h_q;
  in.num_heads_kv = c.h_kv;
  in.num_pages = total_pages;
  in.max_pages_per_seq = max_pages;
  in.softmax_scale = 0.1352337788608801f;
  in.causal = c.causal;
  in.q = q_bf16.data();
  in.kv_cache = cache.data();
  in.block_table = block_table.data();
  in.seqlens = c.seqlens.data();
  std::vector<float> out(size_t(b) * c.s_q * c.h_q * kDv, -7.f);
  std::vector<float> lse(size_t(b) * c.h_q * c.s_q, -7.f);
  ref::mla_decode(in, out.data(), lse.data());

  const int heads_per_kv = c.h_q / c.h_kv;
  for (int i = 0; i < b; ++i) {
    const int L = c.seqlens[i];
    for (int s = 0; s < c.s_q; ++s) {
      for (int h = 0; h < c.h_q; ++h) {
        const int g = h / heads_per_kv;
        const float* qr = q.data() + ((size_t(i) * c.s_q + s) * c.h_q + h) * kDqk;
        // Keys visible to query s: j <= L - s_q + s (causal), j < L otherwise.
        const int last = c.causal ? L - c.s_q + s : L - 1;
        std::vector<long double> scores;
        for (int j = 0; j <= last; ++j) {
          long double dot = 0;
          for (int d = 0; d < kDqk; ++d)
            dot += (long double)qr[d] * dense_k[i][(size_t(j) * c.h_kv + g) * kDqk + d];
          scores.push_back(dot * in.softmax_scale);
        }
        const float* got = out.data() + ((size_t(i) * c.s_q + s) * c.h_q + h) * kDv;
        const float got_lse = lse[(size_t(i) * c.h_q + h) * c.s_q + s];
        if (scores.empty()) {
          EXPECT_TRUE(std::isinf(got_lse) && got_lse > 0) << "seq " << i << " row " << s;
          for (int d = 0; d < kDv; ++d) ASSERT_EQ(got[d], 0.f);
          continue;
        }
        long double total = 0;
        for (long double x : scores) total += std::exp(x);
        const long double want_lse = std::log(total);
        EXPECT_NEAR(got_lse, (double)want_lse, 1e-5 * std::max(1.0, std::fabs((double)want_lse)))
            << "seq " << i << " s " << s << " head " << h;
        for (int d = 0; d < kDv; ++d) {
          long double want = 0;
          for (size_t j = 0; j < scores.size(); ++j)
            want += std::exp(scores[j]) / total * dense_k[i][(j * c.h_kv + g) * kDqk + d];
          ASSERT_NEAR(got[d], (double)want, 1e-5)
              << "seq " << i << " s " << s << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST(MlaDecodeRef, MatchesBruteForceNonCausal) {
  run_case({1, 3, 1, false, {1, 64, 65, 130}}, 1);
}

TEST(MlaDecodeRef, MatchesBruteForceCausalMultiTokenQueries) {
  run_case({3, 2, 1, true, {3, 70, 128, 5}}, 2);
}

TEST(MlaDecodeRef, SeqlenZeroAndRowsThatSeeNoKey) {
  // seqlen 0: out 0, lse +inf; seqlen 1 with s_q 3 causal: rows 0 and 1 see nothing.
  run_case({3, 2, 1, true, {0, 1, 2, 77}}, 3);
}

TEST(MlaDecodeRef, SeveralKvHeads) {
  run_case({2, 4, 2, true, {33, 100}}, 4);
}

TEST(MlaDecodeRef, RejectsBlockTableEntryOutsideTheCache) {
  std::vector<bf16> q(kDqk, float_to_bf16(0.5f));
  std::vector<bf16> cache(size_t(kPage) * kDqk, float_to_bf16(0.25f));
  std::vector<int32_t> block_table = {5};
  std::vector<int32_t> seqlens = {10};
  ref::MlaDecodeInputs<bf16> in;
  in.batch = 1;
  in.num_heads_q = 1;
  in.num_pages = 1;
  in.max_pages_per_seq = 1;
  in.softmax_scale = 0.1f;
  in.q = q.data();
  in.kv_cache = cache.data();
  in.block_table = block_table.data();
  in.seqlens = seqlens.data();
  std::vector<float> out(kDv), lse(1);
  try {
    ref::mla_decode(in, out.data(), lse.data());
    FAIL() << "expected mla::Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("block_table[0][0] = 5"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace mla
