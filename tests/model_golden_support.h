// The Hugging Face golden fixtures of tests/fixtures and one way of running them through a model
// (shared by the CPU backend's golden test and the CUDA backend's): the prompt fed in chunks of a
// given size into a scrambled, NaN-filled cache, then greedy generation one token per step.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/sampler.h"
#include "ref/moe_routing.h"
#include "weights/safetensors.h"

namespace mla::testing {

inline std::string fixture_dir(const std::string& name) {
  return std::string(MLA_TEST_FIXTURES_DIR) + "/" + name;
}

struct Golden {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::vector<float> prompt_logits;     // [prompt, vocab]
  std::vector<float> generated_logits;  // [generated, vocab]
  int vocab = 0;
};

inline std::vector<float> read_f32(const weights::SafetensorsFile& file, const std::string& name) {
  const weights::TensorInfo* info = file.find(name);
  EXPECT_NE(info, nullptr) << name;
  std::vector<float> values(info->numel());
  weights::convert_to_f32(*info, values.data());
  return values;
}

inline Golden load_golden(const std::string& dir) {
  Golden golden;
  const nlohmann::json json = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  golden.prompt_ids = json["prompt_ids"].get<std::vector<int32_t>>();
  golden.generated_ids = json["generated_ids"].get<std::vector<int32_t>>();
  const weights::SafetensorsFile file(dir + "/golden.safetensors");
  golden.prompt_logits = read_f32(file, "prompt_logits");
  golden.generated_logits = read_f32(file, "generated_logits");
  golden.vocab = static_cast<int>(golden.prompt_logits.size() / golden.prompt_ids.size());
  return golden;
}

struct PathRun {
  std::vector<float> prompt_logits;     // [prompt, vocab]
  std::vector<int32_t> generated_ids;   // greedy, ours
  std::vector<float> generated_logits;  // [generated, vocab]
};

// Feeds the prompt `chunk` tokens per step (1: token by token, absorbed decode path), then
// generates greedily one token per step.
inline PathRun run_path(model::Model& model, const Golden& golden, int chunk) {
  const int prompt = static_cast<int>(golden.prompt_ids.size());
  const int generate = static_cast<int>(golden.generated_ids.size());
  const int capacity = prompt + generate;
  const int pages = (capacity + 63) / 64;
  // Pages in reverse order, pages 0 and 1 owned by nobody: the block table matters.
  std::vector<int32_t> page_order(pages);
  for (int i = 0; i < pages; ++i) page_order[i] = pages + 1 - i;
  model::SequenceRunner sequence(model, capacity, page_order);
  for (model::Tensor& layer : sequence.cache().layers)
    model.backend().fill(layer, std::numeric_limits<float>::quiet_NaN());

  PathRun result;
  for (int begin = 0; begin < prompt; begin += chunk) {
    const int count = std::min(chunk, prompt - begin);
    const std::vector<float> logits = sequence.feed(
        std::span<const int32_t>(golden.prompt_ids.data() + begin, count), /*all_logits=*/true);
    result.prompt_logits.insert(result.prompt_logits.end(), logits.begin(), logits.end());
  }
  std::vector<float> last(result.prompt_logits.end() - golden.vocab, result.prompt_logits.end());
  for (int i = 0; i < generate; ++i) {
    const int32_t next = model::argmax(last.data(), golden.vocab);
    result.generated_ids.push_back(next);
    result.generated_logits.insert(result.generated_logits.end(), last.begin(), last.end());
    if (i + 1 < generate) last = sequence.feed(std::span<const int32_t>(&next, 1));
  }
  return result;
}

inline float max_abs(const std::vector<float>& values) {
  float result = 0.f;
  for (float v : values) result = std::max(result, std::fabs(v));
  return result;
}

// Max |a - b| over the first min(|a|, |b|) values; a NaN difference counts as infinity.
inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float result = 0.f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float diff = std::fabs(a[i] - b[i]);
    result = std::isnan(diff) ? std::numeric_limits<float>::infinity() : std::max(result, diff);
  }
  return result;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return max_abs_diff(std::span<const float>(a), std::span<const float>(b));
}

// The CPU backend, recording how firmly the router chose for each token (ref::routing_margin,
// the smallest over the MoE layers). For one sequence run by run_path: margins[p] belongs to the
// token at position p (steps feed positions in order).
class RoutingMarginBackend final : public model::CpuBackend {
 public:
  std::vector<float> margins;

  void begin_step(const model::StepPlan& plan) override {
    CpuBackend::begin_step(plan);
    step_begin_ = margins.size();
  }
  void moe_route(const model::Tensor& router_logits, const model::Tensor& correction_bias,
                 const ref::MoeRoutingParams& params, model::Tensor& expert_ids,
                 model::Tensor& expert_weights) override {
    CpuBackend::moe_route(router_logits, correction_bias, params, expert_ids, expert_weights);
    const float* bias = correction_bias.empty() ? nullptr : correction_bias.as<float>();
    const size_t tokens = static_cast<size_t>(router_logits.shape[0]);
    margins.resize(std::max(margins.size(), step_begin_ + tokens),
                   std::numeric_limits<float>::infinity());
    for (size_t t = 0; t < tokens; ++t)
      margins[step_begin_ + t] = std::min(
          margins[step_begin_ + t],
          ref::routing_margin(router_logits.as<float>() + t * params.num_experts, bias, params));
  }

 private:
  size_t step_begin_ = 0;
};

// Max |a - b| of each row of `vocab` values.
inline std::vector<float> row_max_abs_diff(const std::vector<float>& a, const std::vector<float>& b,
                                           int vocab) {
  EXPECT_EQ(a.size(), b.size());
  std::vector<float> rows(std::min(a.size(), b.size()) / vocab);
  const std::span<const float> all_a(a), all_b(b);
  for (size_t r = 0; r < rows.size(); ++r)
    rows[r] = max_abs_diff(all_a.subspan(r * vocab, vocab), all_b.subspan(r * vocab, vocab));
  return rows;
}

}  // namespace mla::testing
