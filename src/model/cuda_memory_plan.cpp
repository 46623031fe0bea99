// plan_cuda_memory(); see cuda_memory_plan.h.
#include "model/cuda_memory_plan.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "model/memory_plan.h"
#include "model/synthetic_batch.h"

namespace mla::model {
namespace {

struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};

DeviceMemory device_memory(cudaStream_t stream) {
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
  DeviceMemory memory;
  MLA_CUDA_CHECK(cudaMemGetInfo(&memory.free, &memory.total));
  return memory;
}

}  // namespace

std::string describe(const CudaMemoryPlan& p) {
  return fmt::format(
      "memory: weights {:.2f} GB, activations (arena) {:.2f} GB, KV cache {:.2f} GB = {} pages "
      "of 64 = {} tokens (budget {:.2f} of {:.1f} GB, graphs and transients reserve {:.2f} GB, "
      "profiled in {:.1f} s)",
      p.weight_bytes / 1e9, p.arena_bytes / 1e9, p.kv_cache_bytes / 1e9, p.num_pages, p.num_tokens,
      p.total_memory_bytes > 0 ? double(p.budget_bytes) / p.total_memory_bytes : 0.0,
      p.total_memory_bytes / 1e9, p.reserve_bytes / 1e9, p.profile_seconds);
}

CudaMemoryPlan plan_cuda_memory(Model& model, CudaBackend& backend,
                                const CudaMemoryPlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const weights::ModelConfig& config = model.config();
  constexpr int kPageSize = 64;
  CudaMemoryPlan plan;
  const DeviceMemory initial = device_memory(backend.stream());
  plan.total_memory_bytes = initial.total;
  plan.weight_bytes = backend.stats().weight_bytes;
  check_weights_fit(plan.weight_bytes, initial.total, options.gpu_memory_utilization);
  plan.budget_bytes = memory_budget_bytes(initial.total, options.gpu_memory_utilization);

  // The profile: a temporary cache as large as the largest profiled step needs (zeros: cached
  // context then routes and attends like any other), and an arena of nearly all that is free.
  const std::vector<SyntheticBatchShape> shapes =
      memory_profile_shapes(options.max_num_batched_tokens, options.max_num_seqs,
                            options.max_model_len, options.profile_decode_context);
  std::vector<SyntheticBatch> batches;
  int profile_pages = 1;
  for (const SyntheticBatchShape& shape : shapes) {
    batches.push_back(make_synthetic_batch(shape, config.vocab_size, kPageSize));
    profile_pages = std::max(profile_pages, batches.back().num_pages);
  }
  size_t graph_bytes = 0;
  {
    LatentCache cache;
    try {
      cache = model.allocate_cache(profile_pages, kPageSize);
    } catch (const Error& error) {
      throw_error(
          "memory profile: no room for a {}-page temporary cache after the weights ({}): lower "
          "--max-num-seqs or --max-model-len",
          profile_pages, error.what());
    }
    for (Tensor& layer : cache.layers) backend.fill(layer, 0.0f);
    // Room left outside the arena while profiling: a step's transient buffers and one graph.
    constexpr size_t kOutsideArena = size_t(2) << 30;
    const DeviceMemory before = device_memory(backend.stream());
    if (before.free < kOutsideArena + 256 * kMiB)
      throw_error(
          "memory profile: only {:.2f} GB free after the weights and a {}-page temporary cache; "
          "nothing left for activations",
          before.free / 1e9, profile_pages);
    backend.resize_arena(before.free - kOutsideArena);
    for (size_t i = 0; i < batches.size(); ++i) {
      const bool last = i + 1 == batches.size();
      DeviceMemory around;
      try {
        // The decode step's first run on this (cache, bucket) is eager (Model::forward); the
        // second is recorded, and that one's graph is what is measured.
        if (last) {
          model.forward(batches[i].batch, cache);
          around = device_memory(backend.stream());
        }
        model.forward(batches[i].batch, cache);
      } catch (const Error& error) {
        const SyntheticBatchShape& s = shapes[i];
        throw_error(
            "memory profile: the step of {} decode rows and {} prefill tokens ({} sequences, "
            "{} tokens of context) failed: {} (lower --max-num-batched-tokens, --max-num-seqs or "
            "--max-model-len)",
            s.decode_rows, s.prefill_tokens, s.prefill_sequences, s.first_prefill_context,
            error.what());
      }
      if (last) {
        const DeviceMemory after = device_memory(backend.stream());
        graph_bytes = around.free > after.free ? around.free - after.free : 0;
      }
    }
    MLA_CUDA_CHECK(cudaStreamSynchronize(backend.stream()));
    plan.arena_peak_bytes = backend.arena().peak();
  }  // the temporary cache is freed here
  plan.arena_bytes = arena_bytes_for_peak(plan.arena_peak_bytes);
  backend.resize_arena(plan.arena_bytes);  // drops the profile's graph too

  // Graphs: the measured capture (0 when the decode step ran eagerly) once per bucket a decode
  // step of up to max_num_seqs rows can take. Transients outside the arena: the step's fp32
  // logits once more (the GPU sampler's scratch, or copy_to_host's buffer), plus 256 MiB.
  std::set<int> buckets;
  for (int rows = 1; rows <= options.max_num_seqs; ++rows)
    if (const int bucket = model.graph_bucket(rows); bucket > 0) buckets.insert(bucket);
  plan.graph_bytes_measured = buckets.empty() ? 0 : graph_bytes;
  const size_t graph_reserve =
      buckets.empty() ? 0 : std::max(graph_bytes, 2 * kMiB) * buckets.size() + 64 * kMiB;
  const size_t logits_bytes = size_t(options.max_num_seqs) * size_t(config.vocab_size) * 4;
  plan.reserve_bytes = graph_reserve + logits_bytes + 256 * kMiB;

  const DeviceMemory now = device_memory(backend.stream());
  plan.in_use_bytes = now.total - now.free;
  KvCacheInputs inputs;
  inputs.total_memory_bytes = now.total;
  inputs.gpu_memory_utilization = options.gpu_memory_utilization;
  inputs.weight_bytes = plan.weight_bytes;
  inputs.in_use_bytes = plan.in_use_bytes;
  inputs.graph_reserve_bytes = plan.reserve_bytes;
  inputs.page_bytes = latent_page_bytes(config, kPageSize);
  inputs.page_size = kPageSize;
  // One sequence of max_model_len tokens must fit, plus the page kept for copy-on-write.
  inputs.min_pages = (options.max_model_len + kPageSize - 1) / kPageSize + 1;
  const KvCachePlan kv = plan_kv_cache(inputs);
  plan.kv_cache_bytes = kv.kv_bytes;
  plan.num_pages = kv.num_pages;
  plan.num_tokens = kv.num_tokens;
  plan.profile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

}  // namespace mla::model
