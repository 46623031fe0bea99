// The model's step-graph orchestration (Model::forward), on a CPU backend that pretends to record
// and replay: which steps run eagerly, which are recorded and which replayed, what the padded plan
// looks like, that keys follow the cache, and that an error while recording aborts the recording
// and leaves the backend usable. The recordings' values are the CUDA backend's test
// (tests/gpu/test_cuda_backend_gpu.cpp); this is the bookkeeping, checked in CI.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"

namespace mla {
namespace {

class RecordingBackend final : public model::CpuBackend {
 public:
  bool supports_step_graphs() const override { return true; }
  void begin_step(const model::StepPlan& plan) override {
    steps.push_back(plan);
    model::CpuBackend::begin_step(plan);
  }
  bool replay_step_graph(int id) override {
    events.push_back("replay " + std::to_string(id));
    return true;
  }
  void begin_graph_capture() override {
    events.push_back("capture");
    capturing = true;
  }
  int end_graph_capture() override {
    events.push_back("end");
    capturing = false;
    return ++last_id;
  }
  void abort_graph_capture() override {
    events.push_back("abort");
    capturing = false;
  }
  void rms_norm(const model::Tensor& x, const model::Tensor& weight, float eps,
                model::Tensor& out) override {
    if (capturing && fail_while_capturing) throw std::runtime_error("injected failure");
    model::CpuBackend::rms_norm(x, weight, eps, out);
  }

  std::vector<std::string> events;
  std::vector<model::StepPlan> steps;
  bool capturing = false;
  bool fail_while_capturing = false;
  int last_id = 0;
};

std::string fixture() {
  return std::string(MLA_TEST_FIXTURES_DIR) + "/tiny-deepseek-v3";
}

TEST(StepGraphs, EagerThenRecordedThenReplayedPerCacheAndBucket) {
  RecordingBackend backend;
  model::ModelOptions options;
  options.graph_max_context = 256;  // 4 pages wide block tables in graph steps
  const auto model = model::Model::load(fixture(), backend, options);
  model::SequenceRunner first(*model, 128);
  const std::vector<int32_t> prompt = {5, 9, 200, 7};
  first.feed(prompt);  // prefill: eager, no graph
  EXPECT_TRUE(backend.events.empty());
  for (int32_t token : {3, 17, 99, 4}) first.feed(std::span<const int32_t>(&token, 1));
  // Decode steps of bucket 1: eager once, recorded, then replayed.
  EXPECT_EQ(backend.events, (std::vector<std::string>{"capture", "end", "replay 1", "replay 1"}));
  const model::StepPlan& graph_step = backend.steps.back();
  EXPECT_EQ(graph_step.num_tokens, 1);
  EXPECT_EQ(graph_step.decode_max_pages, 4);
  EXPECT_EQ(graph_step.decode_num_heads, model->config().num_attention_heads);

  // Another cache: its own recording.
  backend.events.clear();
  model::SequenceRunner second(*model, 128);
  for (int32_t token : {1, 2, 3}) second.feed(std::span<const int32_t>(&token, 1));
  EXPECT_EQ(backend.events, (std::vector<std::string>{"capture", "end", "replay 2"}));

  // Three decode rows: bucket 4, padded with an inert row.
  backend.events.clear();
  model::LatentCache cache = model->allocate_cache(8);
  model::ForwardBatch batch;
  batch.token_ids = {1, 2, 3};
  batch.positions = {0, 0, 0};
  batch.slot_mapping = {0 * 64, 1 * 64, 2 * 64};
  batch.sequences = {{0, 1, 0, {0}}, {1, 1, 0, {1}}, {2, 1, 0, {2}}};
  batch.logit_rows = {2, 0, 1};
  const model::Tensor logits = model->forward(batch, cache);
  EXPECT_EQ(logits.shape[0], 3);
  const model::StepPlan& padded = backend.steps.back();
  EXPECT_EQ(padded.num_tokens, 4);
  EXPECT_EQ(padded.slot_mapping[3], -1);
  EXPECT_EQ(padded.decode_seqlens[3], 0);
  EXPECT_EQ(padded.logit_rows, (std::vector<int32_t>{2, 0, 1, 3}));
  EXPECT_TRUE(backend.events.empty());  // the first step of this (cache, bucket) is eager
}

TEST(StepGraphs, AFailedRecordingIsAbortedAndTheNextStepRecordsAgain) {
  RecordingBackend backend;
  const auto model = model::Model::load(fixture(), backend);
  model::SequenceRunner sequence(*model, 128);
  const int32_t token = 11;
  sequence.feed(std::span<const int32_t>(&token, 1));  // eager warm-up of bucket 1
  backend.fail_while_capturing = true;
  EXPECT_THROW(model->forward(
                   [&] {
                     model::ForwardBatch batch;
                     batch.token_ids = {12};
                     batch.positions = {1};
                     batch.slot_mapping = {1};  // position 1 on page 0
                     batch.sequences = {{0, 1, 1, {0}}};
                     batch.logit_rows = {0};
                     return batch;
                   }(),
                   sequence.cache()),
               std::runtime_error);
  EXPECT_EQ(backend.events, (std::vector<std::string>{"capture", "abort"}));
  backend.fail_while_capturing = false;
  backend.events.clear();
  sequence.feed(std::span<const int32_t>(&token, 1));
  EXPECT_EQ(backend.events, (std::vector<std::string>{"capture", "end"}));
}

TEST(StepGraphs, EagerModeNeverRecords) {
  RecordingBackend backend;
  model::ModelOptions options;
  options.step_graphs = false;
  const auto model = model::Model::load(fixture(), backend, options);
  model::SequenceRunner sequence(*model, 128);
  for (int32_t token : {1, 2, 3, 4}) sequence.feed(std::span<const int32_t>(&token, 1));
  EXPECT_TRUE(backend.events.empty());
  EXPECT_EQ(backend.steps.back().decode_max_pages, 1);  // not padded
}

}  // namespace
}  // namespace mla
