// The CPU backend: the Backend interface over the fp32 reference ops of src/ref. Exact and slow;
// what CI and a machine without a GPU run, and the oracle a GPU backend is compared with.
//
// Everything is fp32 in host memory, weights (dequantised from BF16/FP8 at load) and the latent
// cache included; the decode op is ref::mla_decode<float>. The backend counts what it holds
// (stats()) so tests can see that the model uploads exactly the checkpoint's weights and
// allocates nothing weight-sized per step: W_UK and W_UV stay views of kv_b_proj.
#pragma once

#include <memory>
#include <vector>

#include "model/backend.h"

namespace mla::model {

struct CpuBackendStats {
  int64_t weight_elements = 0;  // every upload_weight and concat_weight_rows, less released
  int64_t weight_uploads = 0;
  // When log_allocations is set: the shape of every allocate() since.
  bool log_allocations = false;
  std::vector<std::vector<int64_t>> allocations;
};

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  CpuBackendStats& stats() { return stats_; }

  Tensor allocate(DType dtype, std::initializer_list<int64_t> shape) override;
  Tensor upload_weight(const std::string& name, std::vector<float> values,
                       std::initializer_list<int64_t> shape) override;
  void release_weight(Tensor& weight) override;
  Tensor new_weight(DType dtype, int64_t rows, int64_t cols) override;
  void fill(Tensor& dst, float value) override;
  void copy_to_host(const Tensor& src, float* dst) override;
  void begin_step(const StepPlan& plan) override;

  void embedding(const Tensor& table, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& weight, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override;
  using Backend::rope;
  void rope(const Tensor& x, const RopeTable& rope, int64_t first_token, Tensor& out) override;

  void write_latent_cache(const Tensor& latent, Tensor& cache) override;
  void gather_latent_cache(const Tensor& cache, const std::vector<int64_t>& slots,
                           Tensor& out) override;
  void head_matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) override;
  void mla_decode(const Tensor& q, const Tensor& cache, int head_dim_v, float softmax_scale,
                  Tensor& out, Tensor& lse) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const std::vector<AttentionSpan>& spans, float softmax_scale, Tensor& out,
                 Tensor& lse) override;
  void merge_attention(Tensor& out, Tensor& lse, const Tensor& part_out,
                       const Tensor& part_lse) override;

  void moe_route(const Tensor& router_logits, const Tensor& correction_bias,
                 const ref::MoeRoutingParams& params, Tensor& expert_ids,
                 Tensor& expert_weights) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   const ExpertWeights& experts, bool accumulate, Tensor& out) override;

 private:
  const StepPlan& plan() const;

  const StepPlan* plan_ = nullptr;
  CpuBackendStats stats_;
};

}  // namespace mla::model
