// The MoE ops on the GPU against the CPU twins (src/ref), on random adversarial inputs.
//
// Router: exact expert ids and weights to 1e-6 relative against ref::route_experts, for the
// V2-Lite (64 experts, top-6, softmax, greedy), V2 (160 experts, group_limited_greedy) and V3 (256
// experts, 8 groups / best 4, sigmoid + bias, noaux_tc, renormalised, × 2.5) shapes, on continuous
// logits and on logits from 8 values (ties everywhere, ties between groups), with NaN in the row
// padding; with appended (folded shared) experts after the routed pairs. Experts: against
// ref::moe_experts for 1, 5, 64, 300 tokens, the V2-Lite shape and odd shapes (k and n tails),
// experts with zero rows (their weights are NaN: never read), all pairs on one expert, dropped ids,
// padded x/out strides (NaN / sentinels in the padding), fp32 and bf16 out, accumulate on and off;
// the device plan equals ref::moe_permutation; reruns are bit-identical, a token's output does not
// depend on its batch, and route + experts replay in a CUDA graph with new inputs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/fill.h"
#include "mla/kernels/moe.h"
#include "ref/moe_experts.h"
#include "ref/moe_routing.h"

namespace mla {
namespace {

using kernels::MoeRouteParams;
using kernels::MoeScoring;
using kernels::MoeTopk;
using kernels::ScalarType;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

ref::MoeRoutingParams to_ref(const MoeRouteParams& p) {
  ref::MoeRoutingParams r;
  r.num_experts = p.num_experts;
  r.top_k = p.top_k;
  r.n_group = p.n_group;
  r.topk_group = p.topk_group;
  r.scoring =
      p.scoring == MoeScoring::kSoftmax ? ref::MoeScoring::kSoftmax : ref::MoeScoring::kSigmoid;
  r.method = p.method == MoeTopk::kGreedy               ? ref::MoeTopk::kGreedy
             : p.method == MoeTopk::kGroupLimitedGreedy ? ref::MoeTopk::kGroupLimitedGreedy
                                                        : ref::MoeTopk::kNoauxTc;
  r.normalize = p.normalize;
  r.routed_scaling_factor = p.routed_scaling_factor;
  r.scale_when_normalized = p.scale_when_normalized;
  r.appended_experts = p.appended_experts;
  return r;
}

MoeRouteParams v2_lite_routing() {  // DeepSeek-V2-Lite
  return {64, 6, 1, 1, MoeScoring::kSoftmax, MoeTopk::kGreedy, false, 1.0f, false};
}
MoeRouteParams v2_routing() {  // DeepSeek-V2 (236B)
  return {160, 6, 8, 3, MoeScoring::kSoftmax, MoeTopk::kGroupLimitedGreedy, false, 16.0f, false};
}
MoeRouteParams v3_routing() {  // DeepSeek-V3 / R1
  return {256, 8, 8, 4, MoeScoring::kSigmoid, MoeTopk::kNoauxTc, true, 2.5f, true};
}

struct RouteResult {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Routes on the GPU and checks against the reference; returns the GPU result.
RouteResult check_route(const MoeRouteParams& p, const std::vector<float>& logits, int64_t stride,
                        const std::vector<float>& bias, int64_t tokens, const std::string& label) {
  cuda::DeviceBuffer<float> d_logits(logits.size()), d_bias(bias.size());
  d_logits.copy_from_host(logits);
  if (!bias.empty()) d_bias.copy_from_host(bias);
  const int pairs = p.top_k + p.appended_experts;
  cuda::DeviceBuffer<int32_t> d_ids(tokens * pairs);
  cuda::DeviceBuffer<float> d_weights(tokens * pairs);
  kernels::launch_moe_route(d_logits.data(), stride, bias.empty() ? nullptr : d_bias.data(), tokens,
                            p, d_ids.data(), d_weights.data(), nullptr);
  RouteResult got{d_ids.to_host(), d_weights.to_host()};
  std::vector<int32_t> want_ids(pairs);
  std::vector<float> want_weights(pairs);
  int reported = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    ref::route_experts(&logits[t * stride], bias.empty() ? nullptr : bias.data(), to_ref(p),
                       want_ids.data(), want_weights.data());
    for (int i = 0; i < pairs; ++i) {
      const int32_t id = got.ids[t * pairs + i];
      const float w = got.weights[t * pairs + i];
      const bool ok = id == want_ids[i] &&
                      std::fabs(double(w) - want_weights[i]) <= 1e-6 * std::fabs(want_weights[i]);
      if (!ok && reported++ < 5)
        ADD_FAILURE() << label << ": token " << t << " slot " << i << ": got expert " << id
                      << " weight " << w << ", want expert " << want_ids[i] << " weight "
                      << want_weights[i];
    }
  }
  EXPECT_EQ(reported, 0) << label << ": mismatching (token, slot) entries";
  return got;
}

// Logits [tokens, num_experts + 5] with NaN in the padding; `ties`: values from 8 levels only.
std::vector<float> random_logits(int64_t tokens, int num_experts, int64_t stride, bool ties,
                                 std::mt19937& rng) {
  std::vector<float> logits(tokens * stride, kNaN);
  std::normal_distribution<float> normal(0.f, 2.f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int e = 0; e < num_experts; ++e)
      logits[t * stride + e] = ties ? float(int(rng() % 8)) * 0.25f - 1.f : normal(rng);
  return logits;
}

void route_sweep(const MoeRouteParams& p, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t tokens : {1, 7, 300}) {
    for (bool ties : {false, true}) {
      const int64_t stride = p.num_experts + 5;
      const std::vector<float> logits = random_logits(tokens, p.num_experts, stride, ties, rng);
      // The bias is passed for every method; only noaux_tc may read it.
      std::vector<float> bias(p.num_experts);
      std::normal_distribution<float> small(0.f, 0.05f);
      for (float& b : bias) b = ties ? float(int(rng() % 3)) * 0.125f : small(rng);
      check_route(p, logits, stride, bias, tokens,
                  fmt::format("experts {} top_k {} tokens {} ties {}", p.num_experts, p.top_k,
                              tokens, ties));
    }
  }
}

TEST(MoeRouteGpu, V2LiteSoftmaxGreedy) {
  MLA_REQUIRE_SM90_GPU();
  route_sweep(v2_lite_routing(), 1);
}

TEST(MoeRouteGpu, V2SoftmaxGroupLimitedGreedy) {
  MLA_REQUIRE_SM90_GPU();
  route_sweep(v2_routing(), 2);
}

TEST(MoeRouteGpu, V3SigmoidNoauxTcWithBias) {
  MLA_REQUIRE_SM90_GPU();
  route_sweep(v3_routing(), 3);
}

TEST(MoeRouteGpu, NormalisationAndScalingVariants) {
  MLA_REQUIRE_SM90_GPU();
  std::mt19937 rng(4);
  for (bool normalize : {false, true}) {
    for (bool scale_when_normalized : {false, true}) {
      for (int top_k : {1, 2, 6}) {
        MoeRouteParams p = v2_lite_routing();
        p.normalize = normalize;
        p.scale_when_normalized = scale_when_normalized;
        p.routed_scaling_factor = 2.5f;
        p.top_k = top_k;
        const std::vector<float> logits = random_logits(33, p.num_experts, 64, false, rng);
        check_route(p, logits, 64, {}, 33,
                    fmt::format("normalize {} scale_when_normalized {} top_k {}", normalize,
                                scale_when_normalized, top_k));
      }
    }
  }
  // Every logit equal: the lowest ids win, in order; also with sigmoid + noaux_tc and no bias.
  for (MoeRouteParams p : {v2_lite_routing(), v3_routing(), v2_routing()}) {
    const std::vector<float> logits(p.num_experts, 0.5f);
    const RouteResult got = check_route(p, logits, p.num_experts, {}, 1, "all equal");
    for (int i = 0; i < p.top_k; ++i) EXPECT_EQ(got.ids[i], i);
  }
}

// The folded shared experts: appended_experts pairs after the routed ones (ids num_experts..,
// weight exactly 1, as ref::route_experts), and the routed pairs bit-identical to a route without
// them; up to top_k + appended_experts = 32 (every lane writes a pair).
TEST(MoeRouteGpu, AppendedExpertsFollowTheRoutedPairs) {
  MLA_REQUIRE_SM90_GPU();
  std::mt19937 rng(5);
  struct Case {
    MoeRouteParams routing;
    int appended;
  };
  MoeRouteParams wide = v2_lite_routing();
  wide.top_k = 30;
  for (const Case& c : {Case{v2_lite_routing(), 2}, Case{v2_routing(), 2}, Case{v3_routing(), 1},
                        Case{v3_routing(), 3}, Case{wide, 2}}) {
    for (bool ties : {false, true}) {
      MoeRouteParams p = c.routing;
      const int64_t tokens = 37;
      const int64_t stride = p.num_experts + 5;
      const std::vector<float> logits = random_logits(tokens, p.num_experts, stride, ties, rng);
      std::vector<float> bias(p.num_experts);
      std::normal_distribution<float> small(0.f, 0.05f);
      for (float& b : bias) b = small(rng);
      const std::string label = fmt::format("experts {} top_k {} appended {} ties {}",
                                            p.num_experts, p.top_k, c.appended, ties);
      const RouteResult routed = check_route(p, logits, stride, bias, tokens, label + " (none)");
      p.appended_experts = c.appended;
      const RouteResult folded = check_route(p, logits, stride, bias, tokens, label);
      const int pairs = p.top_k + c.appended;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int i = 0; i < p.top_k; ++i) {
          EXPECT_EQ(folded.ids[t * pairs + i], routed.ids[t * p.top_k + i]) << label;
          EXPECT_EQ(std::memcmp(&folded.weights[t * pairs + i], &routed.weights[t * p.top_k + i],
                                sizeof(float)),
                    0)
              << label;
        }
        for (int j = 0; j < c.appended; ++j) {
          EXPECT_EQ(folded.ids[t * pairs + p.top_k + j], p.num_experts + j) << label;
          EXPECT_EQ(folded.weights[t * pairs + p.top_k + j], 1.0f) << label;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Experts.

// All experts' weights, on the device (bf16, random) and on the host (the same values as float).
struct ExpertBank {
  int64_t hidden = 0, intermediate = 0;
  int num_experts = 0;
  cuda::DeviceBuffer<bf16> gate, up, down, poison;  // poison: NaN, for experts nobody picked
  std::vector<float> host_gate, host_up, host_down;

  ExpertBank(int64_t h, int64_t i, int e, uint64_t seed)
      : hidden(h), intermediate(i), num_experts(e) {
    const size_t matrix = size_t(h) * i;
    gate = cuda::DeviceBuffer<bf16>(matrix * e);
    up = cuda::DeviceBuffer<bf16>(matrix * e);
    down = cuda::DeviceBuffer<bf16>(matrix * e);
    poison = cuda::DeviceBuffer<bf16>(matrix);
    MLA_CUDA_CHECK(cudaMemset(poison.data(), 0xff, poison.bytes()));  // bf16 0xffff is NaN
    // gate x and up x have unit variance for unit-variance x; so does down(activation), roughly.
    const kernels::RandomFillSpec gate_spec{seed, float(1.0 / std::sqrt(double(h))), 1.f};
    const kernels::RandomFillSpec up_spec{seed + 1, gate_spec.stddev, 1.f};
    const kernels::RandomFillSpec down_spec{seed + 2, float(2.0 / std::sqrt(double(i))), 1.f};
    fill(gate, host_gate, gate_spec);
    fill(up, host_up, up_spec);
    fill(down, host_down, down_spec);
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
  }

  static void fill(cuda::DeviceBuffer<bf16>& device, std::vector<float>& host,
                   const kernels::RandomFillSpec& spec) {
    kernels::launch_fill_random_bf16(device.data(), device.size(), spec, nullptr);
    host.resize(device.size());
    const float scale = spec.scale();
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = round_to_bf16(kernels::random_fill_value(spec.seed, i, scale, spec.clip));
  }
};

enum class IdPattern { kDistinct, kEveryThirdExpert, kAllOnOneExpert, kWithDropped };

struct ExpertsCase {
  int64_t tokens = 1;
  int top_k = 1;
  IdPattern ids = IdPattern::kDistinct;
  int64_t x_pad = 0, out_pad = 0;
  ScalarType out_type = ScalarType::kBF16;
  bool accumulate = false;
  uint32_t seed = 0;
  std::string label() const {
    return fmt::format("tokens {} top_k {} ids {} x_pad {} out_pad {} out {} accumulate {}", tokens,
                       top_k, int(ids), x_pad, out_pad,
                       out_type == ScalarType::kF32 ? "f32" : "bf16", accumulate);
  }
};

// One MoE input on host and device: x, ids, weights, out (with its initial contents).
struct ExpertsProblem {
  const ExpertBank& bank;
  ExpertsCase c;
  int64_t x_stride = 0, out_stride = 0;
  std::vector<float> x;  // [tokens, x_stride], bf16 values, NaN padding
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<float> out_initial;  // [tokens, out_stride] as out_type values (NaN / sentinels)
  cuda::DeviceBuffer<bf16> d_x;
  cuda::DeviceBuffer<int32_t> d_ids;
  cuda::DeviceBuffer<float> d_weights;
  cuda::DeviceBuffer<const bf16*> d_gate, d_up, d_down;
  cuda::DeviceBuffer<uint8_t> d_out, d_workspace;

  ExpertsProblem(const ExpertBank& b, const ExpertsCase& ec) : bank(b), c(ec) {
    std::mt19937 rng(c.seed);
    const int64_t hidden = bank.hidden;
    const int num_experts = bank.num_experts;
    x_stride = hidden + c.x_pad;
    out_stride = hidden + c.out_pad;
    std::normal_distribution<float> normal(0.f, 1.f);
    x.assign(c.tokens * x_stride, kNaN);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t i = 0; i < hidden; ++i) x[t * x_stride + i] = round_to_bf16(normal(rng));
    ids.resize(c.tokens * c.top_k);
    std::vector<int32_t> pool;
    for (int e = 0; e < num_experts; ++e)
      if (c.ids != IdPattern::kEveryThirdExpert || e % 3 == 1) pool.push_back(e);
    for (int64_t t = 0; t < c.tokens; ++t) {
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int k = 0; k < c.top_k; ++k) {
        int32_t id = pool[k % pool.size()];
        if (c.ids == IdPattern::kAllOnOneExpert) id = num_experts / 2;
        if (c.ids == IdPattern::kWithDropped && rng() % 5 == 0) id = rng() % 2 ? -1 : num_experts;
        ids[t * c.top_k + k] = id;
      }
    }
    std::uniform_real_distribution<float> weight(0.05f, 1.f);
    weights.resize(ids.size());
    for (float& w : weights) w = weight(rng);
    out_initial.assign(c.tokens * out_stride, 12288.f);  // padding sentinel (exact in bf16)
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t i = 0; i < hidden; ++i)
        out_initial[t * out_stride + i] = c.accumulate ? round_to_bf16(normal(rng)) : kNaN;

    std::vector<bf16> x_bf16(x.size());
    for (size_t i = 0; i < x.size(); ++i) x_bf16[i] = float_to_bf16(x[i]);
    d_x = cuda::DeviceBuffer<bf16>(x_bf16.size());
    d_x.copy_from_host(x_bf16);
    d_ids = cuda::DeviceBuffer<int32_t>(ids.size());
    d_ids.copy_from_host(ids);
    d_weights = cuda::DeviceBuffer<float>(weights.size());
    d_weights.copy_from_host(weights);
    // Experts no pair routes to point at NaN weights: the kernels must not touch them.
    std::vector<bool> used(num_experts, false);
    for (int32_t id : ids)
      if (id >= 0 && id < num_experts) used[id] = true;
    const size_t matrix = size_t(hidden) * bank.intermediate;
    std::vector<const bf16*> gate(num_experts), up(num_experts), down(num_experts);
    for (int e = 0; e < num_experts; ++e) {
      gate[e] = used[e] ? bank.gate.data() + e * matrix : bank.poison.data();
      up[e] = used[e] ? bank.up.data() + e * matrix : bank.poison.data();
      down[e] = used[e] ? bank.down.data() + e * matrix : bank.poison.data();
    }
    d_gate = cuda::DeviceBuffer<const bf16*>(num_experts);
    d_gate.copy_from_host(gate);
    d_up = cuda::DeviceBuffer<const bf16*>(num_experts);
    d_up.copy_from_host(up);
    d_down = cuda::DeviceBuffer<const bf16*>(num_experts);
    d_down.copy_from_host(down);
    d_out = cuda::DeviceBuffer<uint8_t>(out_initial.size() * element_bytes());
    // Room for more tokens than this call has: the layout follows params.tokens.
    const size_t workspace = kernels::moe_experts_workspace_size(
        c.tokens + 3, hidden, bank.intermediate, num_experts, c.top_k);
    d_workspace = cuda::DeviceBuffer<uint8_t>(workspace);
  }

  size_t element_bytes() const { return c.out_type == ScalarType::kF32 ? 4 : 2; }

  kernels::MoeExpertsParams params() const {
    kernels::MoeExpertsParams p;
    p.tokens = c.tokens;
    p.hidden = bank.hidden;
    p.intermediate = bank.intermediate;
    p.num_experts = bank.num_experts;
    p.top_k = c.top_k;
    p.x = d_x.data();
    p.x_row_stride = x_stride;
    p.expert_ids = d_ids.data();
    p.expert_weights = d_weights.data();
    p.gate_proj = d_gate.data();
    p.up_proj = d_up.data();
    p.down_proj = d_down.data();
    p.out = d_out.data();
    p.out_type = c.out_type;
    p.out_row_stride = out_stride;
    p.accumulate = c.accumulate;
    p.workspace = d_workspace.data();
    p.workspace_bytes = d_workspace.bytes();
    return p;
  }

  // Resets out to its initial contents and the workspace to 0xff (no reliance on zeros).
  void reset(cudaStream_t stream) {
    std::vector<uint8_t> bytes(d_out.size());
    for (size_t i = 0; i < out_initial.size(); ++i) {
      if (c.out_type == ScalarType::kF32) {
        std::memcpy(&bytes[4 * i], &out_initial[i], 4);
      } else {
        const bf16 v = float_to_bf16(out_initial[i]);
        std::memcpy(&bytes[2 * i], &v, 2);
      }
    }
    d_out.copy_from_host(bytes, stream);
    MLA_CUDA_CHECK(cudaMemsetAsync(d_workspace.data(), 0xff, d_workspace.bytes(), stream));
  }

  std::vector<float> fetch_out(cudaStream_t stream) const {
    const std::vector<uint8_t> bytes = d_out.to_host(stream);
    std::vector<float> out(out_initial.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (c.out_type == ScalarType::kF32) {
        std::memcpy(&out[i], &bytes[4 * i], 4);
      } else {
        bf16 v;
        std::memcpy(&v, &bytes[2 * i], 2);
        out[i] = bf16_to_float(v);
      }
    }
    return out;
  }

  // The twin: out_initial (+)= experts, activation rounded to bf16 as the GPU stores it.
  std::vector<float> reference() const {
    const size_t matrix = size_t(bank.hidden) * bank.intermediate;
    std::vector<const float*> gate(bank.num_experts), up(bank.num_experts), down(bank.num_experts);
    for (int e = 0; e < bank.num_experts; ++e) {
      gate[e] = bank.host_gate.data() + e * matrix;
      up[e] = bank.host_up.data() + e * matrix;
      down[e] = bank.host_down.data() + e * matrix;
    }
    std::vector<float> out = out_initial;
    ref::MoeExpertsArgs args;
    args.tokens = c.tokens;
    args.hidden = bank.hidden;
    args.intermediate = bank.intermediate;
    args.num_experts = bank.num_experts;
    args.top_k = c.top_k;
    args.x = x.data();
    args.x_row_stride = x_stride;
    args.expert_ids = ids.data();
    args.expert_weights = weights.data();
    args.gate_proj = gate.data();
    args.up_proj = up.data();
    args.down_proj = down.data();
    args.out = out.data();
    args.out_row_stride = out_stride;
    args.accumulate = c.accumulate;
    args.round_activation_to_bf16 = true;
    ref::moe_experts(args);
    return out;
  }
};

// Compares the valid [tokens, hidden] part with the twin; the padding must keep its sentinel bit
// for bit.
//
// Tolerances. Both sides use the same bf16 inputs and round the activation to bf16; they differ in
// fp32 (GPU) vs double (twin) accumulation, ~1e-6 relative, which flips the bf16 rounding of about
// one activation in a thousand by one ulp (2^-8 relative): ~1e-4 relative L2 on out. So fp32 out:
// relative L2 ≤ 1e-3; bf16 out adds its own rounding (≤ 2^-9 relative, 2^-9/√3 ≈ 1.1e-3 rms):
// relative L2 ≤ 3e-3. Per element, one flipped activation of a large value (a ≈ 8: ulp 1/16),
// times a large down weight, times the routing weights of every k row of a token that picked the
// same expert (all-on-one-expert: four identical rows) moves an element by up to ~1% of the rms:
// every element within 2e-2 · rms (+ 2^-8 · |want| for bf16 out). compare_stages() checks each
// stage tightly against its own inputs, where no such flip can hide an error.
void compare_out(const ExpertsProblem& problem, const std::vector<float>& got,
                 const std::vector<float>& want, const std::string& label) {
  const int64_t hidden = problem.bank.hidden;
  const bool bf16_out = problem.c.out_type == ScalarType::kBF16;
  double err = 0, norm = 0;
  size_t nan_count = 0, padding_changed = 0;
  for (int64_t t = 0; t < problem.c.tokens; ++t) {
    for (int64_t i = 0; i < problem.out_stride; ++i) {
      const size_t at = t * problem.out_stride + i;
      if (i >= hidden) {
        if (std::memcmp(&got[at], &want[at], 4) != 0) ++padding_changed;
        continue;
      }
      if (std::isnan(got[at])) ++nan_count;
      const double d = double(got[at]) - want[at];
      err += d * d;
      norm += double(want[at]) * want[at];
    }
  }
  EXPECT_EQ(nan_count, 0u) << label << ": NaN in the output (unwritten, or a poisoned expert read)";
  EXPECT_EQ(padding_changed, 0u) << label << ": out's row padding was written";
  const double count = double(problem.c.tokens * hidden);
  const double rms = std::sqrt(norm / count);
  const double relative_l2 = std::sqrt(err / std::max(norm, 1e-30));
  EXPECT_LE(relative_l2, bf16_out ? 3e-3 : 1e-3) << label;
  int reported = 0;
  for (int64_t t = 0; t < problem.c.tokens; ++t) {
    for (int64_t i = 0; i < hidden; ++i) {
      const size_t at = t * problem.out_stride + i;
      const double bound = (bf16_out ? std::ldexp(std::fabs(want[at]), -8) : 0.0) + 2e-2 * rms;
      if (!(std::fabs(double(got[at]) - want[at]) <= bound) && reported++ < 5)
        ADD_FAILURE() << label << ": token " << t << " column " << i << ": got " << got[at]
                      << ", want " << want[at] << " (bound " << bound << ")";
    }
  }
}

// The plan left in the workspace equals ref::moe_permutation; returns the workspace.
std::vector<uint8_t> compare_plan(const ExpertsProblem& problem, const std::string& label) {
  const int num_experts = problem.bank.num_experts;
  const kernels::MoeWorkspaceLayout layout =
      kernels::moe_workspace_layout(problem.c.tokens, problem.bank.hidden,
                                    problem.bank.intermediate, num_experts, problem.c.top_k);
  const std::vector<uint8_t> workspace = problem.d_workspace.to_host();
  const auto ints = [&](size_t offset, size_t count) {
    std::vector<int32_t> v(count);
    std::memcpy(v.data(), workspace.data() + offset, count * 4);
    return v;
  };
  const ref::MoePermutation want =
      ref::moe_permutation(problem.ids.data(), problem.c.tokens, problem.c.top_k, num_experts);
  EXPECT_EQ(ints(layout.counts_offset, num_experts), want.counts) << label;
  EXPECT_EQ(ints(layout.offsets_offset, num_experts + 1), want.offsets) << label;
  EXPECT_EQ(ints(layout.order_offset, want.order.size()), want.order) << label;
  EXPECT_EQ(ints(layout.position_offset, want.position.size()), want.position) << label;
  return workspace;
}

// Each stage against its own exact input, in double: the bf16 activation rows against
// silu(gate x) · (up x) (bound: a bf16 ulp plus 1e-5 of the absolute dot products for fp32
// accumulation), the fp32 expert rows against down · (the GPU's own activation) (1e-4 of the
// absolute dot product), and out against Σ_k w · (the GPU's own expert rows) (+ old out), within
// 1e-6 of the absolute sum (+ 2^-8 relative for bf16 out). An indexing error shows as O(1).
void compare_stages(const ExpertsProblem& problem, const std::vector<uint8_t>& workspace,
                    const std::vector<float>& got, const std::string& label) {
  const ExpertBank& bank = problem.bank;
  const ExpertsCase& c = problem.c;
  const int64_t hidden = bank.hidden, width = bank.intermediate;
  const size_t matrix = size_t(hidden) * width;
  const kernels::MoeWorkspaceLayout layout =
      kernels::moe_workspace_layout(c.tokens, hidden, width, bank.num_experts, c.top_k);
  const ref::MoePermutation plan =
      ref::moe_permutation(problem.ids.data(), c.tokens, c.top_k, bank.num_experts);
  std::vector<bf16> activation(plan.order.size() * width);
  std::memcpy(activation.data(), workspace.data() + layout.activation_offset,
              activation.size() * 2);
  std::vector<float> rows(plan.order.size() * hidden);
  std::memcpy(rows.data(), workspace.data() + layout.expert_out_offset, rows.size() * 4);
  size_t bad_activation = 0, bad_rows = 0, bad_out = 0;
  for (size_t row = 0; row < plan.order.size(); ++row) {
    const int32_t pair = plan.order[row];
    const int32_t e = problem.ids[pair];
    const float* x = &problem.x[(pair / c.top_k) * problem.x_stride];
    const float* gate = bank.host_gate.data() + e * matrix;
    const float* up = bank.host_up.data() + e * matrix;
    const float* down = bank.host_down.data() + e * matrix;
    for (int64_t j = 0; j < width; ++j) {
      double g = 0, u = 0, g_abs = 0, u_abs = 0;
      for (int64_t i = 0; i < hidden; ++i) {
        g += double(x[i]) * gate[j * hidden + i];
        u += double(x[i]) * up[j * hidden + i];
        g_abs += std::fabs(double(x[i]) * gate[j * hidden + i]);
        u_abs += std::fabs(double(x[i]) * up[j * hidden + i]);
      }
      const double a = g / (1.0 + std::exp(-g)) * u;
      const double bound =
          std::ldexp(std::fabs(a), -8) +
          2 * (1.1 * std::fabs(u) * 1e-5 * g_abs + (std::fabs(g) + 0.3) * 1e-5 * u_abs) + 1e-6;
      const double got_a = bf16_to_float(activation[row * width + j]);
      if (!(std::fabs(got_a - a) <= bound) && bad_activation++ < 3)
        ADD_FAILURE() << label << ": activation row " << row << " column " << j << ": got " << got_a
                      << ", want " << a;
    }
    for (int64_t i = 0; i < hidden; ++i) {
      double y = 0, y_abs = 0;
      for (int64_t j = 0; j < width; ++j) {
        const double term =
            double(bf16_to_float(activation[row * width + j])) * down[i * width + j];
        y += term;
        y_abs += std::fabs(term);
      }
      const double got_y = rows[row * hidden + i];
      if (!(std::fabs(got_y - y) <= 1e-4 * y_abs + 1e-7) && bad_rows++ < 3)
        ADD_FAILURE() << label << ": expert row " << row << " column " << i << ": got " << got_y
                      << ", want " << y;
    }
  }
  const bool bf16_out = c.out_type == ScalarType::kBF16;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t i = 0; i < hidden; ++i) {
      const double old = c.accumulate ? problem.out_initial[t * problem.out_stride + i] : 0.0;
      double sum = old, sum_abs = std::fabs(old);
      for (int k = 0; k < c.top_k; ++k) {
        const int32_t row = plan.position[t * c.top_k + k];
        if (row < 0) continue;
        const double term = double(problem.weights[t * c.top_k + k]) * rows[row * hidden + i];
        sum += term;
        sum_abs += std::fabs(term);
      }
      const double bound =
          (bf16_out ? std::ldexp(std::fabs(sum), -8) : 0.0) + 1e-6 * sum_abs + 1e-30;
      const double got_out = got[t * problem.out_stride + i];
      if (!(std::fabs(got_out - sum) <= bound) && bad_out++ < 3)
        ADD_FAILURE() << label << ": out token " << t << " column " << i << ": got " << got_out
                      << ", want " << sum << " from the GPU's own expert rows";
    }
  }
  EXPECT_EQ(bad_activation + bad_rows + bad_out, 0u) << label;
}

void check_experts(const ExpertBank& bank, const ExpertsCase& c) {
  const std::string label = c.label();
  ExpertsProblem problem(bank, c);
  problem.reset(nullptr);
  kernels::launch_moe_experts(problem.params(), nullptr);
  const std::vector<float> got = problem.fetch_out(nullptr);
  compare_out(problem, got, problem.reference(), label);
  const std::vector<uint8_t> workspace = compare_plan(problem, label);
  // The stage checks cost as much as the twin again: done where that is quick.
  const double macs = double(c.tokens) * c.top_k * bank.hidden * bank.intermediate;
  if (macs <= 2e9) compare_stages(problem, workspace, got, label);
  // Again, from the same initial out: bit-identical.
  problem.reset(nullptr);
  kernels::launch_moe_experts(problem.params(), nullptr);
  const std::vector<float> again = problem.fetch_out(nullptr);
  EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * 4)) << label << ": rerun differs";
}

TEST(MoeExpertsGpu, V2LiteShapeDecodeBatches) {
  MLA_REQUIRE_SM90_GPU();
  const ExpertBank bank(2048, 1408, 64, 100);  // hidden, moe_intermediate_size, n_routed_experts
  uint32_t seed = 1;
  for (int64_t tokens : {1, 5, 64, 300}) {
    for (int variant = 0; variant < 2; ++variant) {
      ExpertsCase c;
      c.tokens = tokens;
      c.top_k = 6;
      c.x_pad = variant == 0 ? 0 : 24;
      c.out_pad = variant == 0 ? 0 : 8;
      c.out_type = variant == 0 ? ScalarType::kBF16 : ScalarType::kF32;
      c.accumulate = variant == 1;
      c.seed = seed++;
      check_experts(bank, c);
    }
  }
}

TEST(MoeExpertsGpu, OddShapesAndIdPatterns) {
  MLA_REQUIRE_SM90_GPU();
  // hidden 200 = 3 · 64 + 8 and intermediate 72: partial k tiles in both GEMMs, partial n tiles.
  const ExpertBank bank(200, 72, 7, 200);
  uint32_t seed = 50;
  for (int64_t tokens : {1, 5, 64, 300}) {
    for (IdPattern ids : {IdPattern::kDistinct, IdPattern::kEveryThirdExpert,
                          IdPattern::kAllOnOneExpert, IdPattern::kWithDropped}) {
      for (bool accumulate : {false, true}) {
        ExpertsCase c;
        c.tokens = tokens;
        c.top_k = ids == IdPattern::kEveryThirdExpert ? 2 : 3;
        c.ids = ids;
        c.x_pad = 8 * (seed % 3);
        c.out_pad = 8 * ((seed + 1) % 3);
        c.out_type = seed % 2 ? ScalarType::kF32 : ScalarType::kBF16;
        c.accumulate = accumulate;
        c.seed = seed++;
        check_experts(bank, c);
      }
    }
  }
}

TEST(MoeExpertsGpu, ManyExpertsAndOneCrowdedExpert) {
  MLA_REQUIRE_SM90_GPU();
  {
    // The odd shape (k and n tails) again with 200 experts: many small experts, partial tiles.
    const ExpertBank bank(200, 72, 200, 250);
    for (IdPattern ids : {IdPattern::kDistinct, IdPattern::kWithDropped}) {
      ExpertsCase c;
      c.tokens = 300;
      c.top_k = 3;
      c.ids = ids;
      c.x_pad = 16;
      c.out_pad = 8;
      c.out_type = ScalarType::kF32;
      c.accumulate = ids == IdPattern::kWithDropped;
      c.seed = 31 + int(ids);
      check_experts(bank, c);
    }
  }
  {
    // V3's routing width (256 experts, top-8) with small matrices.
    const ExpertBank bank(128, 64, 256, 300);
    for (int64_t tokens : {1, 64, 300}) {
      ExpertsCase c;
      c.tokens = tokens;
      c.top_k = 8;
      c.out_type = ScalarType::kF32;
      c.seed = 7 + uint32_t(tokens);
      check_experts(bank, c);
    }
  }
  {
    // 1000 tokens × top-4 all on one expert: 4000 rows, 125 row tiles of one expert.
    const ExpertBank bank(264, 136, 16, 400);
    ExpertsCase c;
    c.tokens = 1000;
    c.top_k = 4;
    c.ids = IdPattern::kAllOnOneExpert;
    c.out_pad = 16;
    c.seed = 9;
    check_experts(bank, c);
  }
}

TEST(MoeExpertsGpu, TokenOutputDoesNotDependOnItsBatch) {
  MLA_REQUIRE_SM90_GPU();
  const ExpertBank bank(2048, 1408, 64, 500);
  ExpertsCase c;
  c.tokens = 64;
  c.top_k = 6;
  c.out_type = ScalarType::kF32;
  c.seed = 77;
  ExpertsProblem big(bank, c);
  big.reset(nullptr);
  kernels::launch_moe_experts(big.params(), nullptr);
  const std::vector<float> all = big.fetch_out(nullptr);
  // The first 5 tokens alone, and the first token alone (same x, ids and weights: the device
  // buffers' prefixes): other tiles, other row positions, the same per-row arithmetic.
  for (int64_t tokens : {5, 1}) {
    kernels::MoeExpertsParams p = big.params();
    p.tokens = tokens;
    big.reset(nullptr);
    kernels::launch_moe_experts(p, nullptr);
    const std::vector<float> few = big.fetch_out(nullptr);
    EXPECT_EQ(0, std::memcmp(all.data(), few.data(), tokens * bank.hidden * 4))
        << "a token's output changed with the batch around it (" << tokens << " tokens)";
  }
}

TEST(MoeGpu, RouteAndExpertsReplayInACudaGraph) {
  MLA_REQUIRE_SM90_GPU();
  const MoeRouteParams routing = v2_lite_routing();
  const ExpertBank bank(2048, 1408, routing.num_experts, 600);
  ExpertsCase c;
  c.tokens = 48;
  c.top_k = routing.top_k;
  c.out_type = ScalarType::kBF16;
  c.accumulate = true;
  c.seed = 5;
  ExpertsProblem problem(bank, c);  // ids and weights below come from the router instead
  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::DeviceBuffer<float> d_logits(c.tokens * routing.num_experts);
  cuda::DeviceBuffer<int32_t>& d_ids = problem.d_ids;
  cuda::DeviceBuffer<float>& d_weights = problem.d_weights;
  // Every expert may be picked on some replay: no poisoned experts here.
  const size_t matrix = size_t(bank.hidden) * bank.intermediate;
  std::vector<const bf16*> gate(bank.num_experts), up(bank.num_experts), down(bank.num_experts);
  for (int e = 0; e < bank.num_experts; ++e) {
    gate[e] = bank.gate.data() + e * matrix;
    up[e] = bank.up.data() + e * matrix;
    down[e] = bank.down.data() + e * matrix;
  }
  problem.d_gate.copy_from_host(gate);
  problem.d_up.copy_from_host(up);
  problem.d_down.copy_from_host(down);

  cudaGraph_t graph;
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  kernels::launch_moe_route(d_logits.data(), routing.num_experts, nullptr, c.tokens, routing,
                            d_ids.data(), d_weights.data(), stream);
  kernels::launch_moe_experts(problem.params(), stream);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::mt19937 rng(12);
  for (int replay = 0; replay < 3; ++replay) {
    const std::vector<float> logits =
        random_logits(c.tokens, routing.num_experts, routing.num_experts, replay == 1, rng);
    d_logits.copy_from_host(logits, stream);
    problem.reset(stream);
    MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    const std::vector<float> got = problem.fetch_out(stream);
    problem.ids = d_ids.to_host(stream);
    problem.weights = d_weights.to_host(stream);
    std::vector<int32_t> want_ids(routing.top_k);
    std::vector<float> want_weights(routing.top_k);
    for (int64_t t = 0; t < c.tokens; ++t) {
      ref::route_experts(&logits[t * routing.num_experts], nullptr, to_ref(routing),
                         want_ids.data(), want_weights.data());
      for (int i = 0; i < routing.top_k; ++i)
        ASSERT_EQ(problem.ids[t * routing.top_k + i], want_ids[i]) << "replay " << replay;
    }
    compare_out(problem, got, problem.reference(), fmt::format("graph replay {}", replay));
  }
  MLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MLA_CUDA_CHECK(cudaGraphDestroy(graph));
  MLA_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mla
