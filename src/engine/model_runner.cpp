// The real ModelRunner over Model::forward; see model_runner.h.
#include "engine/model_runner.h"

#include "core/error.h"

namespace mla::engine {

ModelCacheRunner::ModelCacheRunner(model::Model& model, int num_pages)
    : model_(model), cache_(model.allocate_cache(num_pages, 64)) {}

int ModelCacheRunner::max_position_embeddings() const {
  return static_cast<int>(model_.config().max_position_embeddings);
}

std::vector<int32_t> ModelCacheRunner::eos_token_ids() const {
  return {model_.config().eos_token_ids.begin(), model_.config().eos_token_ids.end()};
}

std::vector<model::RowSample> ModelRunner::run_and_sample(std::span<const PageCopy>,
                                                          const model::ForwardBatch&,
                                                          std::span<const model::RowSampling>) {
  throw_error("this model runner does not sample on the device");
}

std::vector<model::RowSample> ModelCacheRunner::run_and_sample(
    std::span<const PageCopy> copies, const model::ForwardBatch& batch,
    std::span<const model::RowSampling> rows) {
  for (const PageCopy& copy : copies) model_.copy_cache_page(cache_, copy.src, copy.dst);
  const model::Tensor logits = model_.forward(batch, cache_);
  return model_.backend().sample(logits, rows);
}

std::vector<float> ModelCacheRunner::run(std::span<const PageCopy> copies,
                                         const model::ForwardBatch& batch) {
  for (const PageCopy& copy : copies) model_.copy_cache_page(cache_, copy.src, copy.dst);
  const model::Tensor logits = model_.forward(batch, cache_);
  std::vector<float> host(static_cast<size_t>(logits.numel()));
  model_.backend().copy_to_host(logits, host.data());
  return host;
}

}  // namespace mla::engine
