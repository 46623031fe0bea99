// The start-up memory budget's arithmetic (pure; cuda_memory_plan.h measures its inputs on the
// GPU): weights first, then the per-step arena sized from a profiled peak, then what is left of
// gpu_memory_utilization · total memory, less a reserve for CUDA graphs, becomes latent-cache
// pages.
//
// The subtle thing: "in use" is measured from the device (total − free), so it counts everything
// already allocated (weights, arena, cuBLAS workspace, the CUDA context, other processes on the
// GPU); the cache gets budget − in use − reserve, never budget − weights.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weights/model_config.h"

namespace mla::model {

constexpr size_t kMiB = size_t(1) << 20;

// Bytes of one cache page over all layers: layers · page_size · latent_dim · 2 (bf16).
size_t latent_page_bytes(const weights::ModelConfig& config, int page_size = 64);

// The arena for a profiled peak: peak · 1.1 + 64 MiB, rounded up to 2 MiB.
size_t arena_bytes_for_peak(size_t peak_bytes);

// gpu_memory_utilization · total_memory; throws mla::Error unless 0 < utilization <= 1.
size_t memory_budget_bytes(size_t total_memory_bytes, double gpu_memory_utilization);

// Throws mla::Error (saying by how much, and what to change) when the weights alone exceed the
// budget.
void check_weights_fit(size_t weight_bytes, size_t total_memory_bytes,
                       double gpu_memory_utilization);

struct KvCacheInputs {
  size_t total_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  size_t weight_bytes = 0;         // for the error message (already inside in_use_bytes)
  size_t in_use_bytes = 0;         // device memory in use now (total − free)
  size_t graph_reserve_bytes = 0;  // kept free for CUDA graphs and transient buffers
  size_t page_bytes = 0;           // latent_page_bytes()
  int page_size = 64;
  int min_pages = 2;  // fewer than this is an error
};

struct KvCachePlan {
  size_t budget_bytes = 0;  // utilization · total
  size_t kv_bytes = 0;      // num_pages · page_bytes
  int num_pages = 0;
  int64_t num_tokens = 0;  // num_pages · page_size
};

// num_pages = (budget − in_use − reserve) / page_bytes (capped at INT32_MAX). Throws mla::Error
// when the weights exceed the budget or fewer than min_pages fit.
KvCachePlan plan_kv_cache(const KvCacheInputs& inputs);

}  // namespace mla::model
