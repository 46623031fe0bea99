// The memory budget's arithmetic; see memory_plan.h.
#include "model/memory_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"

namespace mla::model {
namespace {

double gb(size_t bytes) {
  return bytes / 1e9;
}

}  // namespace

size_t latent_page_bytes(const weights::ModelConfig& config, int page_size) {
  return size_t(config.num_hidden_layers) * size_t(page_size) * size_t(config.latent_dim()) * 2;
}

size_t arena_bytes_for_peak(size_t peak_bytes) {
  constexpr size_t kRound = 2 * kMiB;
  const size_t bytes = peak_bytes + peak_bytes / 10 + 64 * kMiB;
  return (bytes + kRound - 1) / kRound * kRound;
}

size_t memory_budget_bytes(size_t total_memory_bytes, double gpu_memory_utilization) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    throw_error("--gpu-memory-utilization must be in (0, 1], got {}", gpu_memory_utilization);
  return static_cast<size_t>(static_cast<double>(total_memory_bytes) * gpu_memory_utilization);
}

void check_weights_fit(size_t weight_bytes, size_t total_memory_bytes,
                       double gpu_memory_utilization) {
  const size_t budget = memory_budget_bytes(total_memory_bytes, gpu_memory_utilization);
  if (weight_bytes > budget)
    throw_error(
        "the weights alone ({:.2f} GB) exceed the memory budget ({:.2f} GB = {} of {:.2f} GB): "
        "raise --gpu-memory-utilization or use a larger GPU",
        gb(weight_bytes), gb(budget), gpu_memory_utilization, gb(total_memory_bytes));
}

KvCachePlan plan_kv_cache(const KvCacheInputs& in) {
  MLA_CHECK_GT(in.page_bytes, size_t(0));
  MLA_CHECK_GT(in.page_size, 0);
  check_weights_fit(in.weight_bytes, in.total_memory_bytes, in.gpu_memory_utilization);
  KvCachePlan plan;
  plan.budget_bytes = memory_budget_bytes(in.total_memory_bytes, in.gpu_memory_utilization);
  const size_t needed = in.in_use_bytes + in.graph_reserve_bytes;
  const size_t left = plan.budget_bytes > needed ? plan.budget_bytes - needed : 0;
  const size_t pages = std::min<size_t>(left / in.page_bytes, std::numeric_limits<int32_t>::max());
  if (pages < size_t(std::max(in.min_pages, 1)))
    throw_error(
        "no room for the latent cache: the budget is {:.2f} GB ({} of {:.2f} GB) and {:.2f} GB is "
        "in use (weights {:.2f} GB, activations and the rest) plus {:.2f} GB kept for CUDA graphs, "
        "leaving {:.3f} GB for at least {} pages of {:.1f} MB: raise --gpu-memory-utilization or "
        "lower --max-num-batched-tokens",
        gb(plan.budget_bytes), in.gpu_memory_utilization, gb(in.total_memory_bytes),
        gb(in.in_use_bytes), gb(in.weight_bytes), gb(in.graph_reserve_bytes), gb(left),
        std::max(in.min_pages, 1), in.page_bytes / 1e6);
  plan.num_pages = static_cast<int>(pages);
  plan.kv_bytes = pages * in.page_bytes;
  plan.num_tokens = int64_t(pages) * in.page_size;
  return plan;
}

}  // namespace mla::model
