// The model's GEMMs (linear, and the absorbed per-head products as strided batches): row-major
// out[M, N] = x[M, K] · W[N, K]ᵀ (or · W[K, N]), bf16 operands, fp32 accumulation, bf16 or fp32
// out, through cuBLASLt with the algorithm chosen by measurement.
//
// Why: at decode sizes (M = a batch of 1..256 rows) the GEMMs only stream their weights, and
// cuBLAS's default choice for M = 128, N = 3072, K = 2048 runs at ~1.2 TB/s (too few CTAs, no
// split-K; measured on the H200, `mla bench step --profile`). For each new problem with M at most
// kTunedMaxRows, every candidate cuBLASLt's heuristic offers is timed on the real operands, with
// the L2 cache flushed before each run (the weights must come from HBM, as they do in a step), and
// the fastest is kept; the heuristic's first stays unless another is at least 3 % faster (fewer
// choices flip between processes on timing noise). Larger M (prefill) takes the heuristic's first
// untimed. Tuning synchronises the stream, so it never happens during graph capture: a problem
// first seen there runs the heuristic's first and is tuned when next seen outside a capture.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "cuda/device.h"

struct cublasLtContext;

namespace mla::cuda {

// One GEMM or a strided batch of them (elements, not bytes, everywhere): per batch entry b,
// out_b [m, n] = x_b [m, k] · W_b, where W_b is row-major [n, k] used transposed (w_nk, the
// checkpoint's [out, in]) or row-major [k, n].
struct GemmProblem {
  int64_t m = 0;               // rows of x and out
  int64_t n = 0;               // out features
  int64_t k = 0;               // in features
  int64_t x_row_stride = 0;    // >= k
  int64_t out_row_stride = 0;  // >= n
  bool out_f32 = false;        // else bf16
  bool w_nk = true;            // W row-major [n, k]; else [k, n]
  int64_t w_row_stride = 0;    // 0: contiguous (k when w_nk, else n)
  int64_t batch = 1;
  int64_t x_batch_stride = 0, w_batch_stride = 0, out_batch_stride = 0;

  auto key() const {
    return std::make_tuple(m, n, k, x_row_stride, out_row_stride, out_f32, w_nk, w_row_stride,
                           batch, x_batch_stride, w_batch_stride, out_batch_stride);
  }
};

struct TunedGemmStats {
  int64_t problems_tuned = 0;   // timed once, remembered
  int64_t tuned_not_first = 0;  // tuned problems where a later candidate won
  double tuning_ms = 0;         // host time spent tuning
};

class TunedGemm {
 public:
  static constexpr int64_t kTunedMaxRows = 256;
  static constexpr int kMaxCandidates = 8;

  // workspace: device memory the algorithms may use (split-K), owned by the caller, used on
  // `stream` only. l2_bytes: the device's L2 size (the flush writes twice that).
  TunedGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes, size_t l2_bytes);
  ~TunedGemm();
  TunedGemm(const TunedGemm&) = delete;
  TunedGemm& operator=(const TunedGemm&) = delete;

  // x and w bf16, out bf16 or fp32, as `p` describes them. `may_tune`: false while a graph is
  // being captured.
  void run(const GemmProblem& p, const void* x, const void* w, void* out, bool may_tune);

  const TunedGemmStats& stats() const { return stats_; }

 private:
  struct Plan;  // cuBLASLt descriptors and the chosen algorithm of one problem
  // The problem and the operands' alignments (bytes, at most 256: the heuristic's candidates
  // depend on them).
  using Key = std::tuple<decltype(GemmProblem{}.key()), int, int, int>;
  std::unique_ptr<Plan> make_plan(const GemmProblem& p, int x_align, int w_align,
                                  int out_align) const;
  void tune(Plan& plan, const void* x, const void* w, void* out);
  int try_matmul(const Plan& plan, int candidate, const void* x, const void* w,
                 void* out);  // status
  void matmul(const Plan& plan, int candidate, const void* x, const void* w, void* out);

  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  cublasLtContext* lt_ = nullptr;
  DeviceBuffer<char> flush_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  TunedGemmStats stats_;
};

}  // namespace mla::cuda
