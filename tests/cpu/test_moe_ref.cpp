// The MoE permutation plan (ref::moe_permutation: what the GPU plan kernel must reproduce), the
// workspace layout and row-tile bound (mla/kernels/moe_plan.h), and the CPU experts twin on cases
// worked by hand: dropped ids, repeated experts within a token, accumulate.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "mla/kernels/moe_plan.h"
#include "ref/moe_experts.h"

namespace mla {
namespace {

void check_permutation(const std::vector<int32_t>& ids, int64_t tokens, int top_k,
                       int num_experts) {
  const ref::MoePermutation plan = ref::moe_permutation(ids.data(), tokens, top_k, num_experts);
  ASSERT_EQ(plan.counts.size(), size_t(num_experts));
  ASSERT_EQ(plan.offsets.size(), size_t(num_experts + 1));
  ASSERT_EQ(plan.position.size(), size_t(tokens * top_k));
  std::vector<int32_t> histogram(num_experts, 0);
  int64_t dropped = 0;
  for (int32_t id : ids) {
    if (id >= 0 && id < num_experts)
      ++histogram[id];
    else
      ++dropped;
  }
  EXPECT_EQ(plan.counts, histogram);
  EXPECT_EQ(plan.offsets[0], 0);
  for (int e = 0; e < num_experts; ++e)
    EXPECT_EQ(plan.offsets[e + 1], plan.offsets[e] + plan.counts[e]);
  EXPECT_EQ(int64_t(plan.order.size()), tokens * top_k - dropped);
  // Sorted by expert, stable (pair index ascending within an expert), position is the inverse.
  for (int e = 0; e < num_experts; ++e) {
    for (int32_t row = plan.offsets[e]; row < plan.offsets[e + 1]; ++row) {
      const int32_t pair = plan.order[row];
      ASSERT_GE(pair, 0);
      ASSERT_LT(pair, tokens * top_k);
      EXPECT_EQ(ids[pair], e);
      EXPECT_EQ(plan.position[pair], row);
      if (row > plan.offsets[e]) {
        EXPECT_LT(plan.order[row - 1], pair);
      }
    }
  }
  for (size_t pair = 0; pair < ids.size(); ++pair)
    if (ids[pair] < 0 || ids[pair] >= num_experts) {
      EXPECT_EQ(plan.position[pair], -1);
    }
  // The GEMM grid's bound on row tiles holds.
  int64_t tiles = 0;
  for (int32_t c : plan.counts)
    tiles += (c + kernels::kMoeRowsPerTile - 1) / kernels::kMoeRowsPerTile;
  EXPECT_LE(tiles, kernels::moe_max_row_tiles(tokens * top_k, num_experts));
}

TEST(MoePermutation, RandomIdsWithDroppedOnes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int num_experts = 1 + int(rng() % 300);
    const int top_k = 1 + int(rng() % 8);
    const int64_t tokens = rng() % 400;
    std::vector<int32_t> ids(tokens * top_k);
    for (int32_t& id : ids) {
      const int r = int(rng() % 100);
      id = r == 0 ? -1 : r == 1 ? num_experts : int(rng() % num_experts);
    }
    check_permutation(ids, tokens, top_k, num_experts);
  }
}

TEST(MoePermutation, AllOnOneExpertAndEmpty) {
  check_permutation(std::vector<int32_t>(300 * 6, 17), 300, 6, 64);
  check_permutation({}, 0, 6, 64);
  check_permutation(std::vector<int32_t>(5 * 2, -1), 5, 2, 4);
}

TEST(MoePermutation, StableOrderExample) {
  // tokens 3, top_k 2: pairs (0,0)=2 (0,1)=0 (1,0)=2 (1,1)=1 (2,0)=0 (2,1)=5(dropped)
  const std::vector<int32_t> ids = {2, 0, 2, 1, 0, 5};
  const ref::MoePermutation plan = ref::moe_permutation(ids.data(), 3, 2, 3);
  EXPECT_EQ(plan.counts, (std::vector<int32_t>{2, 1, 2}));
  EXPECT_EQ(plan.offsets, (std::vector<int32_t>{0, 2, 3, 5}));
  EXPECT_EQ(plan.order, (std::vector<int32_t>{1, 4, 3, 0, 2}));
  EXPECT_EQ(plan.position, (std::vector<int32_t>{3, 0, 4, 2, 1, -1}));
}

TEST(MoeWorkspaceLayout, AlignedDisjointAndMonotone) {
  for (int64_t tokens : {0, 1, 5, 64, 300, 8192}) {
    const kernels::MoeWorkspaceLayout l = kernels::moe_workspace_layout(tokens, 2048, 1408, 64, 6);
    const size_t offsets[] = {l.counts_offset,     l.offsets_offset, l.order_offset,
                              l.position_offset,   l.tiles_offset,   l.activation_offset,
                              l.expert_out_offset, l.total_bytes};
    for (size_t i = 0; i < std::size(offsets); ++i) {
      EXPECT_EQ(offsets[i] % kernels::kMoeWorkspaceAlignment, 0u);
      if (i > 0) {
        EXPECT_LE(offsets[i - 1], offsets[i]);
      }
    }
    const size_t pairs = size_t(tokens) * 6;
    EXPECT_GE(l.position_offset - l.order_offset, pairs * 4);
    EXPECT_GE(l.expert_out_offset - l.activation_offset, pairs * 1408 * 2);
    EXPECT_GE(l.total_bytes - l.expert_out_offset, pairs * 2048 * 4);
    EXPECT_EQ(l.max_row_tiles, kernels::moe_max_row_tiles(int64_t(pairs), 64));
    const size_t next = kernels::moe_workspace_layout(tokens + 1, 2048, 1408, 64, 6).total_bytes;
    EXPECT_LE(l.total_bytes, next);
  }
}

double silu(double g) {
  return g / (1.0 + std::exp(-g));
}

TEST(MoeExpertsRef, HandWorkedScalarExperts) {
  // hidden = intermediate = 1: expert e computes down_e · silu(gate_e · x) · (up_e · x).
  const float gate[3] = {0.5f, -1.0f, 2.0f}, up[3] = {1.5f, 0.25f, -0.5f},
              down[3] = {2.0f, 3.0f, -1.0f};
  const float* gate_p[3] = {&gate[0], &gate[1], &gate[2]};
  const float* up_p[3] = {&up[0], &up[1], &up[2]};
  const float* down_p[3] = {&down[0], &down[1], &down[2]};
  // Token 0 picks experts 2 and 0; token 1 picks expert 1 twice and a dropped id (7).
  const int32_t ids[6] = {2, 0, 7, 1, 1, -1};
  const float weights[6] = {0.25f, 0.75f, 100.f, 0.5f, 0.125f, 100.f};
  const float x[4] = {1.0f, 99.f, -2.0f, 99.f};  // row stride 2: the 99s are never read
  float out[4] = {10.f, 55.f, 20.f, 66.f};
  ref::MoeExpertsArgs args;
  args.tokens = 2;
  args.hidden = 1;
  args.intermediate = 1;
  args.num_experts = 3;
  args.top_k = 3;
  args.x = x;
  args.x_row_stride = 2;
  args.expert_ids = ids;
  args.expert_weights = weights;
  args.gate_proj = gate_p;
  args.up_proj = up_p;
  args.down_proj = down_p;
  args.out = out;
  args.out_row_stride = 2;
  const auto expert = [&](int e, double v) { return down[e] * silu(gate[e] * v) * (up[e] * v); };
  const double want0 = 0.25 * expert(2, 1.0) + 0.75 * expert(0, 1.0);
  const double want1 = 0.5 * expert(1, -2.0) + 0.125 * expert(1, -2.0);
  ref::moe_experts(args);
  EXPECT_FLOAT_EQ(out[0], float(want0));
  EXPECT_FLOAT_EQ(out[2], float(want1));
  EXPECT_EQ(out[1], 55.f);  // padding untouched
  EXPECT_EQ(out[3], 66.f);
  args.accumulate = true;
  ref::moe_experts(args);
  EXPECT_FLOAT_EQ(out[0], float(2 * want0));
  EXPECT_FLOAT_EQ(out[2], float(2 * want1));
  // Rounding the activation to bf16 changes it by at most 2^-9 relative.
  args.accumulate = false;
  args.round_activation_to_bf16 = true;
  ref::moe_experts(args);
  EXPECT_NEAR(out[0], want0, 0.01 * std::fabs(want0));
  const auto activation = [&](int e, double v) {
    return double(round_to_bf16(float(silu(gate[e] * v) * (up[e] * v))));
  };
  EXPECT_EQ(out[0],
            float(0.25 * (activation(2, 1.0) * down[2]) + 0.75 * (activation(0, 1.0) * down[0])));
}

}  // namespace
}  // namespace mla
