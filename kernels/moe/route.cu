// The MoE router on the GPU: one warp per token, expert e in lane e % 32, slot e / 32.
//
// It must pick the same experts as ref::route_experts bit for bit, so the scores are computed as
// the reference does (exp in double, rounded to float once) and every comparison is the
// reference's: larger value first, the lower expert (or group) id among equal values. The softmax
// total is summed as a tree instead of left to right; the difference is in the last bits of a
// double and survives the rounding to float in about one score in 2^28.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "cuda/check.h"
#include "moe/config.h"
#include "moe/kernel_args.h"

namespace mla::kernels::moe {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// The reference's order: larger value first, the lower index among equals.
__device__ __forceinline__ bool ranks_before(float value, int index, float best_value,
                                             int best_index) {
  return value > best_value || (value == best_value && index < best_index);
}

// Warp-wide best (value, index); every lane gets the same answer.
__device__ __forceinline__ void warp_best(float& value, int& index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(kFullMask, value, offset);
    const int other_index = __shfl_xor_sync(kFullMask, index, offset);
    if (ranks_before(other_value, other_index, value, index)) {
      value = other_value;
      index = other_index;
    }
  }
}

// kSlots: experts per lane, ceil(num_experts / 32) rounded up to an instantiated size.
template <int kSlots>
__global__ void __launch_bounds__(32 * kRouteWarpsPerBlock)
    moe_route_kernel(const __grid_constant__ RouteArgs args) {
  const int lane = threadIdx.x & 31;
  const int64_t token = int64_t(blockIdx.x) * kRouteWarpsPerBlock + (threadIdx.x >> 5);
  if (token >= args.tokens) return;  // warp-uniform
  const MoeRouteParams& p = args.params;
  const int num_experts = p.num_experts;
  const float* logits = args.logits + token * args.logits_row_stride;

  // rScore: the routing weights' source; rChoice: what picks (score + bias for noaux_tc).
  float rScore[kSlots], rChoice[kSlots];
  float max_logit = -INFINITY;
#pragma unroll
  for (int slot = 0; slot < kSlots; ++slot) {
    const int expert = slot * 32 + lane;
    rScore[slot] = expert < num_experts ? logits[expert] : -INFINITY;
    max_logit = fmaxf(max_logit, rScore[slot]);
  }
  if (p.scoring == MoeScoring::kSoftmax) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      max_logit = fmaxf(max_logit, __shfl_xor_sync(kFullMask, max_logit, offset));
    double rExp[kSlots];
    double total = 0.0;
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int expert = slot * 32 + lane;
      rExp[slot] = expert < num_experts ? exp(double(rScore[slot]) - double(max_logit)) : 0.0;
      total += rExp[slot];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      total += __shfl_xor_sync(kFullMask, total, offset);
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot)
      if (slot * 32 + lane < num_experts) rScore[slot] = static_cast<float>(rExp[slot] / total);
  } else {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot)
      if (slot * 32 + lane < num_experts)
        rScore[slot] = static_cast<float>(1.0 / (1.0 + exp(-double(rScore[slot]))));
  }
  const bool use_bias = p.method == MoeTopk::kNoauxTc && args.bias != nullptr;
#pragma unroll
  for (int slot = 0; slot < kSlots; ++slot) {
    const int expert = slot * 32 + lane;
    rChoice[slot] = rScore[slot];
    if (use_bias && expert < num_experts) rChoice[slot] = rScore[slot] + args.bias[expert];
  }

  if (p.method != MoeTopk::kGreedy) {
    // Group score: its best choice (group_limited_greedy) or the sum of its best two (noaux_tc).
    const int group_size = num_experts / p.n_group;
    int rGroup[kSlots];
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) rGroup[slot] = (slot * 32 + lane) / group_size;
    float my_group_score = -INFINITY;  // lane g holds group g's score
    for (int group = 0; group < p.n_group; ++group) {
      float best = -INFINITY, second = -INFINITY;
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) {
        const int expert = slot * 32 + lane;
        if (expert < num_experts && rGroup[slot] == group) {
          const float v = rChoice[slot];
          if (v > best) {
            second = best;
            best = v;
          } else if (v > second) {
            second = v;
          }
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other_best = __shfl_xor_sync(kFullMask, best, offset);
        const float other_second = __shfl_xor_sync(kFullMask, second, offset);
        second = fmaxf(fminf(best, other_best), fmaxf(second, other_second));
        best = fmaxf(best, other_best);
      }
      const float score = p.method == MoeTopk::kNoauxTc ? best + second : best;
      if (lane == group) my_group_score = score;
    }
    uint32_t kept_groups = 0;
    for (int round = 0; round < p.topk_group; ++round) {
      float value = -INFINITY;
      int index = INT_MAX;
      if (lane < p.n_group && !((kept_groups >> lane) & 1u)) {
        value = my_group_score;
        index = lane;
      }
      warp_best(value, index);
      kept_groups |= 1u << index;
    }
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int expert = slot * 32 + lane;
      if (expert < num_experts && !((kept_groups >> rGroup[slot]) & 1u)) rChoice[slot] = -INFINITY;
    }
  }

  // top_k rounds of a warp-wide argmax over the experts not taken yet.
  uint32_t taken = 0;  // bit slot: this lane's expert slot · 32 + lane is chosen
  double total = 0.0;
  float my_weight = 0.f;
  int my_expert = 0;
  for (int i = 0; i < p.top_k; ++i) {
    float value = -INFINITY;
    int index = INT_MAX;
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int expert = slot * 32 + lane;
      if (expert < num_experts && !((taken >> slot) & 1u) &&
          ranks_before(rChoice[slot], expert, value, index)) {
        value = rChoice[slot];
        index = expert;
      }
    }
    warp_best(value, index);
    float score = 0.f;
    if ((index & 31) == lane) {
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot)
        if (slot == (index >> 5)) score = rScore[slot];
      taken |= 1u << (index >> 5);
    }
    score = __shfl_sync(kFullMask, score, index & 31);
    total += double(score);  // in order i = 0.. as the reference
    if (lane == i) {
      my_weight = score;
      my_expert = index;
    }
  }
  // Lane i < top_k writes routed pair i; lanes top_k.. the appended (always-on) pairs.
  const int pairs = p.top_k + p.appended_experts;
  if (lane < p.top_k) {
    const bool normalized = p.normalize && p.top_k > 1;
    float weight = my_weight;
    if (normalized) weight = static_cast<float>(double(weight) / (total + 1e-20));
    if (!normalized || p.scale_when_normalized) weight *= p.routed_scaling_factor;
    args.expert_ids[token * pairs + lane] = my_expert;
    args.expert_weights[token * pairs + lane] = weight;
  } else if (lane < pairs) {
    args.expert_ids[token * pairs + lane] = num_experts + (lane - p.top_k);
    args.expert_weights[token * pairs + lane] = 1.0f;
  }
}

}  // namespace

void launch_route_kernel(const RouteArgs& args, cudaStream_t stream) {
  const int64_t blocks = (args.tokens + kRouteWarpsPerBlock - 1) / kRouteWarpsPerBlock;
  const unsigned grid = static_cast<unsigned>(blocks);
  const int block = 32 * kRouteWarpsPerBlock;
  if (args.params.num_experts <= 64)
    moe_route_kernel<2><<<grid, block, 0, stream>>>(args);
  else if (args.params.num_experts <= 256)
    moe_route_kernel<8><<<grid, block, 0, stream>>>(args);
  else
    moe_route_kernel<kMoeMaxExperts / 32><<<grid, block, 0, stream>>>(args);
  MLA_CHECK_LAUNCH("moe_route");
}

}  // namespace mla::kernels::moe
