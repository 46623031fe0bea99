// The start-up memory plan on the GPU (model/cuda_memory_plan.h) with the tiny V2-Lite fixture:
// the arena is sized from the profiled peak, the cache gets what the budget leaves, and every
// profiled step then runs again in the planned arena (no overflow, finite logits); weights over
// the budget are refused before any profiling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "gpu_test_support.h"
#include "model/cuda_backend.h"
#include "model/cuda_memory_plan.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/synthetic_batch.h"
#include "tests/model_golden_support.h"

namespace mla {
namespace {

TEST(CudaMemoryPlan, SizesArenaAndCacheThenRunsTheProfiledSteps) {
  MLA_REQUIRE_SM90_GPU();
  model::CudaBackend backend;
  const auto model = model::Model::load(testing::fixture_dir("tiny-deepseek-v2-lite"), backend);
  model::CudaMemoryPlanOptions options;
  options.gpu_memory_utilization = 0.5;
  options.max_num_batched_tokens = 512;
  options.max_num_seqs = 24;
  options.max_model_len = 1000;
  const model::CudaMemoryPlan plan = model::plan_cuda_memory(*model, backend, options);
  std::printf("%s\n", model::describe(plan).c_str());
  EXPECT_EQ(plan.weight_bytes, backend.stats().weight_bytes);
  EXPECT_GT(plan.arena_peak_bytes, 0u);
  EXPECT_EQ(plan.arena_bytes, model::arena_bytes_for_peak(plan.arena_peak_bytes));
  EXPECT_EQ(backend.arena().capacity(), plan.arena_bytes);
  EXPECT_GE(plan.num_pages, (options.max_model_len + 63) / 64 + 1);
  EXPECT_EQ(plan.kv_cache_bytes,
            size_t(plan.num_pages) * model::latent_page_bytes(model->config()));
  EXPECT_LE(plan.in_use_bytes + plan.reserve_bytes + plan.kv_cache_bytes, plan.budget_bytes);

  // The profiled steps again, in the planned arena, on a cache of the pages they need.
  const auto shapes = model::memory_profile_shapes(options.max_num_batched_tokens,
                                                   options.max_num_seqs, options.max_model_len);
  std::vector<model::SyntheticBatch> batches;
  int pages = 1;
  for (const auto& shape : shapes) {
    batches.push_back(model::make_synthetic_batch(shape, model->config().vocab_size));
    pages = std::max(pages, batches.back().num_pages);
  }
  ASSERT_LE(pages, plan.num_pages);
  model::LatentCache cache = model->allocate_cache(pages);
  for (model::Tensor& layer : cache.layers) backend.fill(layer, 0.0f);
  for (const model::SyntheticBatch& step : batches) {
    model::Tensor logits;
    ASSERT_NO_THROW(logits = model->forward(step.batch, cache));
    std::vector<float> host(static_cast<size_t>(logits.numel()));
    backend.copy_to_host(logits, host.data());
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float v) { return std::isfinite(v); }));
  }
  EXPECT_LE(backend.arena().peak(), backend.arena().capacity());
}

TEST(CudaMemoryPlan, RefusesWeightsOverTheBudget) {
  MLA_REQUIRE_SM90_GPU();
  model::CudaBackend backend;
  const auto model = model::Model::load(testing::fixture_dir("tiny-deepseek-v2-lite"), backend);
  model::CudaMemoryPlanOptions options;
  options.gpu_memory_utilization = 1e-9;  // ~143 bytes of an H200
  try {
    model::plan_cuda_memory(*model, backend, options);
    FAIL() << "weights over the budget were accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("the weights alone"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace mla
