// ModelRunner: the engine's one door to the model. It runs a step's page copies (copy-on-write of
// shared pages) and then the forward pass of the step's flat batch, and returns the logits of the
// batch's logit rows on the host. ModelCacheRunner is the real one (a Model and its LatentCache);
// tests put a fake behind the same interface to run thousands of scheduler steps in seconds.
//
// The subtle thing: copies run in the order given and all before the forward pass, so a page that
// one copy reads may be the target of a later copy in the same step (the scheduler relies on it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace mla::engine {

struct PageCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int vocab_size() const = 0;
  virtual int num_pages() const = 0;
  virtual int max_position_embeddings() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // [batch.logit_rows.size(), vocab_size] fp32, row-major.
  virtual std::vector<float> run(std::span<const PageCopy> copies,
                                 const model::ForwardBatch& batch) = 0;
  // Device sampling: the runner draws the step's tokens itself (the logits stay on the GPU);
  // `rows` says what to draw from which logit row (Scheduler::sampling_rows).
  virtual bool samples_on_device() const { return false; }
  virtual std::vector<model::RowSample> run_and_sample(std::span<const PageCopy> copies,
                                                       const model::ForwardBatch& batch,
                                                       std::span<const model::RowSampling> rows);
};

class ModelCacheRunner final : public ModelRunner {
 public:
  // A latent cache of `num_pages` 64-token pages on the model's backend.
  ModelCacheRunner(model::Model& model, int num_pages);

  int vocab_size() const override { return model_.config().vocab_size; }
  int num_pages() const override { return cache_.num_pages; }
  int max_position_embeddings() const override;
  std::vector<int32_t> eos_token_ids() const override;
  std::vector<float> run(std::span<const PageCopy> copies,
                         const model::ForwardBatch& batch) override;
  bool samples_on_device() const override { return model_.backend().samples_on_device(); }
  std::vector<model::RowSample> run_and_sample(std::span<const PageCopy> copies,
                                               const model::ForwardBatch& batch,
                                               std::span<const model::RowSampling> rows) override;

 private:
  model::Model& model_;
  model::LatentCache cache_;
};

}  // namespace mla::engine
