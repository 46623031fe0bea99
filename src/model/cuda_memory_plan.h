// Start-up memory planning on the CUDA backend, after the weights are loaded: a profiling pass
// runs the largest steps the engine will run (synthetic_batch.h: memory_profile_shapes) on a
// small temporary cache with an arena as large as free memory allows, reads the arena's peak,
// sizes the arena to it (arena_bytes_for_peak), then gives what is left of the budget to latent
// cache pages (memory_plan.h: plan_kv_cache). The caller then allocates the cache
// (engine::ModelCacheRunner(model, plan.num_pages)).
//
// The subtle things: the arena is a bump allocator reset per step whose scratch is released after
// each layer, so its peak is one layer's worst, which grows with the cached context a prefill
// attends to (gathered and up-projected per context chunk): the profile gives its first prefill
// sequence max_model_len tokens in all (context + new). And CUDA graphs take device memory outside
// the arena: the decode profile step captures the largest bucket's graph, its cost is measured
// (free memory before and after) and reserved once per bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/cuda_backend.h"
#include "model/model.h"

namespace mla::model {

struct CudaMemoryPlanOptions {
  double gpu_memory_utilization = 0.90;
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 64;
  int max_model_len = 4096;
  int profile_decode_context = 256;  // cached tokens per row of the profiled decode step
};

struct CudaMemoryPlan {
  size_t total_memory_bytes = 0;
  size_t budget_bytes = 0;  // utilization · total
  size_t weight_bytes = 0;
  size_t arena_peak_bytes = 0;      // the profiled steps' largest
  size_t arena_bytes = 0;           // what the arena was resized to
  size_t graph_bytes_measured = 0;  // one capture of the largest decode bucket
  size_t reserve_bytes = 0;         // kept free: graphs (all buckets) and transient buffers
  size_t in_use_bytes = 0;          // total − free after the arena was resized
  size_t kv_cache_bytes = 0;
  int num_pages = 0;  // 64-token pages
  int64_t num_tokens = 0;
  double profile_seconds = 0;
};

// "memory: weights 31.4 GB, activations (arena) 2.1 GB, KV cache 94.3 GB = 47360 pages of 64 =
// 3031040 tokens (budget 0.90 of 150.0 GB, reserve 0.4 GB)"
std::string describe(const CudaMemoryPlan& plan);

// Throws mla::Error when the weights alone exceed the budget, when a profiled step does not fit
// in the memory left, or when no page fits.
CudaMemoryPlan plan_cuda_memory(Model& model, CudaBackend& backend,
                                const CudaMemoryPlanOptions& options);

}  // namespace mla::model
