// The linear layers' GEMM through cuBLASLt, its algorithm chosen by measurement; see tuned_gemm.h.
//
// Row-major out[M, N] = x[M, K] · Wᵀ is column-major outᵀ [N, M] = Wᵀ · xᵀ with W's row-major
// [N, K] read as a column-major K×N matrix used transposed (A), x as a column-major K×M (B).
#include "cuda/tuned_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "core/error.h"

namespace mla::cuda {

struct TunedGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;  // the heuristic's order
  int chosen = 0;                                           // index into candidates
  bool needs_tuning = false;  // M <= kTunedMaxRows and not timed yet (seen while capturing)

  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

// The largest power of two (at most 256) that divides the address.
int alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  int alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace

TunedGemm::TunedGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes, size_t l2_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  MLA_CUBLAS_CHECK(cublasLtCreate(&lt_));
  flush_ = DeviceBuffer<char>(std::max<size_t>(2 * l2_bytes, size_t(64) << 20));
  MLA_CUDA_CHECK(cudaEventCreate(&start_));
  MLA_CUDA_CHECK(cudaEventCreate(&stop_));
}

TunedGemm::~TunedGemm() {
  plans_.clear();
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

std::unique_ptr<TunedGemm::Plan> TunedGemm::make_plan(const GemmProblem& p, int x_align,
                                                      int w_align, int out_align) const {
  auto plan = std::make_unique<Plan>();
  MLA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_w = p.w_nk ? CUBLAS_OP_T : CUBLAS_OP_N, none = CUBLAS_OP_N;
  MLA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_w, sizeof(op_w)));
  MLA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
  const cudaDataType_t out_type = p.out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  // W row-major [n, k] is column-major k×n (used transposed); row-major [k, n] is column-major n×k.
  const int64_t w_ld = p.w_row_stride > 0 ? p.w_row_stride : (p.w_nk ? p.k : p.n);
  MLA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, p.w_nk ? p.k : p.n,
                                              p.w_nk ? p.n : p.k, w_ld));
  MLA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, p.k, p.m, p.x_row_stride));
  MLA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, out_type, p.n, p.m, p.out_row_stride));
  if (p.batch > 1) {
    const int32_t count = static_cast<int32_t>(p.batch);
    for (auto [layout, stride] :
         {std::pair{plan->a, p.w_batch_stride}, std::pair{plan->b, p.x_batch_stride},
          std::pair{plan->c, p.out_batch_stride}}) {
      MLA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count)));
      MLA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }

  cublasLtMatmulPreference_t preference = nullptr;
  MLA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_bytes_;
  const uint32_t align_a = w_align, align_b = x_align, align_c = out_align;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
  for (auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (status == CUBLAS_STATUS_SUCCESS)
      status =
          cublasLtMatmulPreferenceSetAttribute(preference, attribute, &align_c, sizeof(align_c));
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
  int returned = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                            preference, kMaxCandidates, results, &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  MLA_CUBLAS_CHECK(status);
  for (int i = 0; i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->candidates.push_back(results[i]);
  if (plan->candidates.empty())
    throw_error("cuBLASLt has no algorithm for a {}x{}x{} bf16 GEMM (out {}, strides {} / {})", p.m,
                p.n, p.k, p.out_f32 ? "f32" : "bf16", p.x_row_stride, p.out_row_stride);
  return plan;
}

// The cublasStatus_t as an int (the header does not include cuBLAS).
int TunedGemm::try_matmul(const Plan& plan, int candidate, const void* x, const void* w,
                          void* out) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(lt_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, out, plan.c, out,
                        plan.c, &plan.candidates[candidate].algo, workspace_, workspace_bytes_,
                        stream_);
}

void TunedGemm::matmul(const Plan& plan, int candidate, const void* x, const void* w, void* out) {
  MLA_CUBLAS_CHECK(static_cast<cublasStatus_t>(try_matmul(plan, candidate, x, w, out)));
}

void TunedGemm::tune(Plan& plan, const void* x, const void* w, void* out) {
  const auto begin = std::chrono::steady_clock::now();
  constexpr int kRuns = 3;
  constexpr float kFailed = std::numeric_limits<float>::infinity();
  std::vector<float> best_ms(plan.candidates.size(), kFailed);
  cublasStatus_t last_failure = CUBLAS_STATUS_SUCCESS;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    for (int run = 0; run < kRuns; ++run) {
      MLA_CUDA_CHECK(cudaMemsetAsync(flush_.data(), run, flush_.bytes(), stream_));
      MLA_CUDA_CHECK(cudaEventRecord(start_, stream_));
      // A candidate the heuristic offered but that refuses to run is skipped, not fatal.
      const auto status =
          static_cast<cublasStatus_t>(try_matmul(plan, static_cast<int>(i), x, w, out));
      MLA_CUDA_CHECK(cudaEventRecord(stop_, stream_));
      MLA_CUDA_CHECK(cudaEventSynchronize(stop_));
      if (status != CUBLAS_STATUS_SUCCESS) {
        last_failure = status;
        best_ms[i] = kFailed;
        break;
      }
      float elapsed = 0;
      MLA_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start_, stop_));
      best_ms[i] = std::min(best_ms[i], elapsed);
    }
  }
  const int fastest =
      static_cast<int>(std::min_element(best_ms.begin(), best_ms.end()) - best_ms.begin());
  if (best_ms[fastest] == kFailed) MLA_CUBLAS_CHECK(last_failure);  // every candidate refused
  plan.chosen = best_ms[fastest] < 0.97f * best_ms[0] ? fastest : 0;
  stats_.tuned_not_first += plan.chosen != 0;
  ++stats_.problems_tuned;
  stats_.tuning_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
}

void TunedGemm::run(const GemmProblem& p, const void* x, const void* w, void* out, bool may_tune) {
  MLA_CHECK(p.m > 0 && p.n > 0 && p.k > 0 && p.batch >= 1);
  MLA_CHECK(p.x_row_stride >= p.k && p.out_row_stride >= p.n);
  const Key key{p.key(), alignment_of(x), alignment_of(w), alignment_of(out)};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    std::unique_ptr<Plan> plan = make_plan(p, std::get<1>(key), std::get<2>(key), std::get<3>(key));
    plan->needs_tuning = p.m <= kTunedMaxRows && plan->candidates.size() > 1;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  Plan& plan = *it->second;
  if (plan.needs_tuning && may_tune) {
    tune(plan, x, w, out);
    plan.needs_tuning = false;
  }
  matmul(plan, plan.chosen, x, w, out);  // (while capturing, an untuned plan runs the first)
}

}  // namespace mla::cuda
