// Host side of the MoE ops: boundary validation, the workspace carve-up, and the launch sequence.
//
// Validation happens here, once, with messages that name the argument, the expected and the
// actual value; the kernels trust their params. What cannot be checked here (the device arrays of
// expert pointers, the expert ids) is documented in moe.h; ids out of range are dropped, not read.
#include <cstdint>
#include <limits>
#include <string>

#include "common/arg_checks.h"
#include "core/error.h"
#include "cuda/check.h"
#include "mla/kernels/moe.h"
#include "mla/kernels/phase_marks.h"
#include "moe/config.h"
#include "moe/kernel_args.h"

namespace mla::kernels {
namespace {

using arg_checks::aligned;
using arg_checks::require;

void check_pointer(const void* pointer, const char* op, const char* name, size_t alignment) {
  arg_checks::check_pointer(op, name, pointer, alignment);
}

}  // namespace

void check_moe_route_args(const float* router_logits, int64_t logits_row_stride, int64_t tokens,
                          const MoeRouteParams& p, const int32_t* expert_ids,
                          const float* expert_weights) {
  constexpr const char* op = "moe_route";
  require(p.num_experts >= 1 && p.num_experts <= kMoeMaxExperts, op,
          fmt::format("num_experts must be in [1, {}], got {}", kMoeMaxExperts, p.num_experts));
  require(p.top_k >= 1 && p.top_k <= kMoeMaxTopK && p.top_k <= p.num_experts, op,
          fmt::format("top_k must be in [1, min({}, num_experts = {})], got {}", kMoeMaxTopK,
                      p.num_experts, p.top_k));
  require(p.appended_experts >= 0 && p.top_k + p.appended_experts <= kMoeMaxTopK, op,
          fmt::format("appended_experts must be in [0, {} - top_k = {}], got {}", kMoeMaxTopK,
                      kMoeMaxTopK - p.top_k, p.appended_experts));
  if (p.method != MoeTopk::kGreedy) {
    require(p.n_group >= 1 && p.n_group <= 32 && p.num_experts % p.n_group == 0, op,
            fmt::format("n_group must be in [1, 32] and divide num_experts = {}, got {}",
                        p.num_experts, p.n_group));
    require(
        p.topk_group >= 1 && p.topk_group <= p.n_group, op,
        fmt::format("topk_group must be in [1, n_group = {}], got {}", p.n_group, p.topk_group));
    require(p.method != MoeTopk::kNoauxTc || p.num_experts / p.n_group >= 2, op,
            fmt::format("noaux_tc scores a group by its best two experts: groups need >= 2 "
                        "experts, got {} / {}",
                        p.num_experts, p.n_group));
  }
  require(tokens >= 0 && tokens <= std::numeric_limits<int32_t>::max() / kMoeMaxTopK, op,
          fmt::format("tokens must be in [0, {}], got {}",
                      std::numeric_limits<int32_t>::max() / kMoeMaxTopK, tokens));
  if (tokens == 0) return;
  check_pointer(router_logits, op, "router_logits", 4);
  require(logits_row_stride >= p.num_experts, op,
          fmt::format("logits_row_stride must be >= num_experts = {}, got {}", p.num_experts,
                      logits_row_stride));
  check_pointer(expert_ids, op, "expert_ids", 4);
  check_pointer(expert_weights, op, "expert_weights", 4);
}

void launch_moe_route(const float* router_logits, int64_t logits_row_stride, const float* bias,
                      int64_t tokens, const MoeRouteParams& params, int32_t* expert_ids,
                      float* expert_weights, cudaStream_t stream) {
  check_moe_route_args(router_logits, logits_row_stride, tokens, params, expert_ids,
                       expert_weights);
  if (tokens == 0) return;
  moe::RouteArgs args;
  args.logits = router_logits;
  args.logits_row_stride = logits_row_stride;
  args.bias = bias;
  args.tokens = tokens;
  args.params = params;
  args.expert_ids = expert_ids;
  args.expert_weights = expert_weights;
  moe::launch_route_kernel(args, stream);
}

size_t moe_experts_workspace_size(int64_t max_tokens, int64_t hidden, int64_t intermediate,
                                  int num_experts, int top_k) {
  return moe_workspace_layout(max_tokens, hidden, intermediate, num_experts, top_k).total_bytes;
}

void check_moe_experts_args(const MoeExpertsParams& p) {
  constexpr const char* op = "moe_experts";
  require(p.num_experts >= 1 && p.num_experts <= kMoeMaxExperts, op,
          fmt::format("num_experts must be in [1, {}], got {}", kMoeMaxExperts, p.num_experts));
  require(p.top_k >= 1 && p.top_k <= kMoeMaxTopK, op,
          fmt::format("top_k must be in [1, {}], got {}", kMoeMaxTopK, p.top_k));
  require(p.hidden >= 8 && p.hidden % 8 == 0, op,
          fmt::format("hidden must be a positive multiple of 8 (16-byte rows), got {}", p.hidden));
  require(p.intermediate >= 8 && p.intermediate % 8 == 0 &&
              p.intermediate / moe::kGateUpColumns < 65535,
          op,
          fmt::format("intermediate must be a positive multiple of 8 below {}, got {}",
                      65535 * moe::kGateUpColumns, p.intermediate));
  require(p.hidden / moe::kDownColumns < 65535, op,
          fmt::format("hidden must be below {}, got {}", 65535 * moe::kDownColumns, p.hidden));
  const int64_t max_tokens = std::numeric_limits<int32_t>::max() / (2 * kMoeMaxTopK);
  require(p.tokens >= 0 && p.tokens <= max_tokens, op,
          fmt::format("tokens must be in [0, {}], got {}", max_tokens, p.tokens));
  if (p.tokens == 0) return;
  check_pointer(p.x, op, "x", 16);
  require(p.x_row_stride >= p.hidden && p.x_row_stride % 8 == 0, op,
          fmt::format("x_row_stride must be a multiple of 8 and >= hidden = {}, got {}", p.hidden,
                      p.x_row_stride));
  check_pointer(p.expert_ids, op, "expert_ids", 4);
  check_pointer(p.expert_weights, op, "expert_weights", 4);
  check_pointer(p.gate_proj, op, "gate_proj", 8);
  check_pointer(p.up_proj, op, "up_proj", 8);
  check_pointer(p.down_proj, op, "down_proj", 8);
  check_pointer(p.out, op, "out", 16);
  require(p.out_type == ScalarType::kF32 || p.out_type == ScalarType::kBF16, op,
          "out_type must be kF32 or kBF16");
  require(p.out_row_stride >= p.hidden && p.out_row_stride % 8 == 0, op,
          fmt::format("out_row_stride must be a multiple of 8 and >= hidden = {}, got {}", p.hidden,
                      p.out_row_stride));
  check_pointer(p.workspace, op, "workspace", kMoeWorkspaceAlignment);
  const size_t required =
      moe_experts_workspace_size(p.tokens, p.hidden, p.intermediate, p.num_experts, p.top_k);
  require(p.workspace_bytes >= required, op,
          fmt::format("workspace has {} bytes, needs {} (moe_experts_workspace_size() for {} "
                      "tokens)",
                      p.workspace_bytes, required, p.tokens));
}

void launch_moe_experts(const MoeExpertsParams& p, cudaStream_t stream) {
  check_moe_experts_args(p);
  if (p.tokens == 0) return;
  const MoeWorkspaceLayout layout =
      moe_workspace_layout(p.tokens, p.hidden, p.intermediate, p.num_experts, p.top_k);
  char* base = static_cast<char*>(p.workspace);
  const auto ints = [&](size_t offset) { return reinterpret_cast<int32_t*>(base + offset); };

  moe::PlanArgs plan;
  plan.expert_ids = p.expert_ids;
  plan.pairs = layout.pairs;
  plan.num_experts = p.num_experts;
  plan.max_row_tiles = layout.max_row_tiles;
  plan.counts = ints(layout.counts_offset);
  plan.offsets = ints(layout.offsets_offset);
  plan.order = ints(layout.order_offset);
  plan.position = ints(layout.position_offset);
  plan.tiles = ints(layout.tiles_offset);
  mark_phase("plan", stream);
  moe::launch_plan_kernel(plan, stream);

  bf16* activation = reinterpret_cast<bf16*>(base + layout.activation_offset);
  float* expert_out = reinterpret_cast<float*>(base + layout.expert_out_offset);
  moe::GemmArgs gemm;
  gemm.top_k = p.top_k;
  gemm.counts = plan.counts;
  gemm.offsets = plan.offsets;
  gemm.order = plan.order;
  gemm.tiles = plan.tiles;
  gemm.max_row_tiles = layout.max_row_tiles;

  gemm.n = p.intermediate;
  gemm.k = p.hidden;
  gemm.a = p.x;
  gemm.a_row_stride = p.x_row_stride;
  gemm.b0 = p.gate_proj;
  gemm.b1 = p.up_proj;
  gemm.c = activation;
  mark_phase("gate_up", stream);
  moe::launch_gate_up_kernel(gemm, stream);

  gemm.n = p.hidden;
  gemm.k = p.intermediate;
  gemm.a = activation;
  gemm.a_row_stride = p.intermediate;
  gemm.b0 = p.down_proj;
  gemm.b1 = nullptr;
  gemm.c = expert_out;
  mark_phase("down", stream);
  moe::launch_down_kernel(gemm, stream);

  moe::UnpermuteArgs unpermute;
  unpermute.tokens = p.tokens;
  unpermute.hidden = p.hidden;
  unpermute.top_k = p.top_k;
  unpermute.expert_out = expert_out;
  unpermute.position = plan.position;
  unpermute.expert_weights = p.expert_weights;
  unpermute.out = p.out;
  unpermute.out_type = p.out_type;
  unpermute.out_row_stride = p.out_row_stride;
  unpermute.accumulate = p.accumulate;
  mark_phase("unpermute", stream);
  moe::launch_unpermute_kernel(unpermute, stream);
}

}  // namespace mla::kernels
