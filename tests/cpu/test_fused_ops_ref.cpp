// The CPU twins of the fused GPU ops (src/ref/fused_ops.h) against the plain ops they fuse, and
// the counter-based hash against values computed independently (Python, arbitrary precision).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "core/dtypes.h"
#include "ref/fused_ops.h"
#include "ref/ops.h"
#include "ref/rope.h"

namespace mla {
namespace {

std::vector<float> random_values(size_t count, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

TEST(FusedOpsRef, AddRmsNormIsAddThenRmsNorm) {
  const int64_t rows = 5, cols = 37, residual_stride = 41, delta_stride = 40, out_stride = 39;
  std::vector<float> residual = random_values(rows * residual_stride, 1, 3.f);
  const std::vector<float> delta = random_values(rows * delta_stride, 2);
  const std::vector<float> weight = random_values(cols, 3);
  std::vector<float> out(rows * out_stride, NAN);

  std::vector<float> want_residual = residual;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      want_residual[r * residual_stride + c] += delta[r * delta_stride + c];
  std::vector<float> want_out(rows * out_stride, NAN);
  ref::rms_norm(want_residual.data(), residual_stride, weight.data(), rows, cols, 1e-6f,
                want_out.data(), out_stride);

  ref::add_rms_norm(residual.data(), residual_stride, delta.data(), delta_stride, weight.data(),
                    rows, cols, 1e-6f, out.data(), out_stride);
  for (size_t i = 0; i < residual.size(); ++i)
    ASSERT_TRUE(same_bits(residual[i], want_residual[i])) << i;  // padding untouched too
  for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(same_bits(out[i], want_out[i])) << i;
}

TEST(FusedOpsRef, LatentCacheWriteIsRmsNormPlusRope) {
  const int rank = 24, rope_dim = 8, latent_dim = rank + rope_dim;
  const int64_t tokens = 6, kv_a_stride = latent_dim + 3, out_stride = latent_dim + 1;
  const int64_t num_slots = 10, cache_stride = latent_dim + 2;
  const std::vector<float> kv_a = random_values(tokens * kv_a_stride, 4, 2.f);
  const std::vector<float> weight = random_values(rank, 5);
  ref::RopeParams rope;
  rope.rotary_dim = rope_dim;
  rope.yarn = true;
  rope.factor = 40;
  rope.original_max_position_embeddings = 4096;
  const std::vector<float> inv_freq = ref::rope_inverse_frequencies(rope);
  const std::vector<int32_t> positions = {0, 1, 4095, 4096, 163839, 77};
  const std::vector<int64_t> slots = {3, -1, 9, 0, 10, 5};  // -1 padding, 10 past the end
  std::vector<float> cache(num_slots * cache_stride, NAN);
  std::vector<float> latent_out(tokens * out_stride, NAN);

  ref::LatentCacheWriteArgs args;
  args.kv_a = kv_a.data();
  args.kv_a_stride = kv_a_stride;
  args.kv_norm_weight = weight.data();
  args.eps = 1e-6f;
  args.kv_lora_rank = rank;
  args.rope_dim = rope_dim;
  args.positions = positions.data();
  args.inv_freq = inv_freq.data();
  args.cos_sin_scale = 0.75f;
  args.slots = slots.data();
  args.tokens = tokens;
  args.latent_out = latent_out.data();
  args.latent_out_stride = out_stride;
  args.cache = cache.data();
  args.cache_slot_stride = cache_stride;
  args.num_slots = num_slots;
  ref::latent_cache_write(args);

  // The same thing from the plain twins: rms_norm over kv_c, apply_rope over a copy of k_pe.
  std::vector<float> want(tokens * latent_dim);
  ref::rms_norm(kv_a.data(), kv_a_stride, weight.data(), tokens, rank, 1e-6f, want.data(),
                latent_dim);
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < rope_dim; ++j)
      want[t * latent_dim + rank + j] = kv_a[t * kv_a_stride + rank + j];
  ref::apply_rope(want.data() + rank, tokens, latent_dim, 1, 0, rope_dim, positions.data(),
                  inv_freq.data(), 0.75f);

  std::set<int64_t> written;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < latent_dim; ++j)
      ASSERT_TRUE(same_bits(latent_out[t * out_stride + j], want[t * latent_dim + j])) << t;
    ASSERT_TRUE(std::isnan(latent_out[t * out_stride + latent_dim]));  // padding untouched
    if (slots[t] < 0 || slots[t] >= num_slots) continue;
    written.insert(slots[t]);
    for (int j = 0; j < latent_dim; ++j)
      ASSERT_TRUE(same_bits(cache[slots[t] * cache_stride + j], want[t * latent_dim + j])) << t;
  }
  for (int64_t s = 0; s < num_slots; ++s) {
    const size_t first = written.count(s) ? latent_dim : 0;
    for (int64_t j = first; j < cache_stride; ++j)
      ASSERT_TRUE(std::isnan(cache[s * cache_stride + j])) << "slot " << s << " col " << j;
  }

  // Without latent_out only the cache is written.
  std::vector<float> cache2(num_slots * cache_stride, NAN);
  args.latent_out = nullptr;
  args.cache = cache2.data();
  ref::latent_cache_write(args);
  for (size_t i = 0; i < cache.size(); ++i)
    ASSERT_TRUE(same_bits(cache[i], cache2[i]) || (std::isnan(cache[i]) && std::isnan(cache2[i])));
}

}  // namespace
}  // namespace mla
