// The Backend interface's fused ops, as the sequence of plain ops they fuse: what a backend
// without a fused kernel (the CPU backend) runs, and the definition a fused kernel must match.
#include "model/backend.h"

#include <random>

#include "core/error.h"

namespace mla::model {

Tensor Backend::random_weight(const std::string& name, std::initializer_list<int64_t> shape,
                              uint64_t seed, float stddev) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = normal(rng);
  return upload_weight(name, std::move(values), shape);
}

void Backend::add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps,
                           Tensor& out) {
  add(residual, delta);
  rms_norm(residual, weight, eps, out);
}

Tensor Backend::concat_weight_rows(std::span<const Tensor> parts) {
  MLA_CHECK(!parts.empty());
  const int64_t cols = parts[0].shape[1];
  int64_t rows = 0;
  for (const Tensor& part : parts) {
    MLA_CHECK(part.rank == 2 && part.dtype == parts[0].dtype);
    MLA_CHECK_EQ(part.shape[1], cols);
    rows += part.shape[0];
  }
  Tensor tensor = new_weight(parts[0].dtype, rows, cols);
  int64_t row = 0;
  for (const Tensor& part : parts) {
    Tensor block = tensor.slice(0, row, part.shape[0]);
    copy(part, block);
    row += part.shape[0];
  }
  return tensor;
}

void Backend::latent_cache_write(const Tensor& kv_a, const Tensor& norm_weight, float eps,
                                 const RopeTable& rope_table, Tensor& latent, Tensor& cache) {
  const int64_t kv_lora_rank = norm_weight.shape[0];
  const int64_t rotary_dim = kv_a.shape[1] - kv_lora_rank;
  Tensor kv_c = latent.slice(1, 0, kv_lora_rank);
  rms_norm(kv_a.slice(1, 0, kv_lora_rank), norm_weight, eps, kv_c);
  Tensor k_pe = latent.slice(1, kv_lora_rank, rotary_dim);
  rope(kv_a.slice(1, kv_lora_rank, rotary_dim), rope_table, 0, k_pe);
  write_latent_cache(latent, cache);
}

std::vector<RowSample> Backend::sample(const Tensor& logits, std::span<const RowSampling> rows) {
  throw_error("the {} backend does not sample on the device (sample on the host)", name());
}

}  // namespace mla::model
