// The linear layers' GEMM: row-major out[M, N] = x[M, K] · W[N, K]ᵀ, bf16 operands, fp32
// accumulation, bf16 or fp32 out, through cuBLASLt with the algorithm chosen by measurement.
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

struct GemmProblem {
  int64_t m = 0;               // rows of x and out
  int64_t n = 0;               // out features (rows of W)
  int64_t k = 0;               // in features
  int64_t x_row_stride = 0;    // elements, >= k
  int64_t out_row_stride = 0;  // elements, >= n
  bool out_f32 = false;        // else bf16
};

struct TunedGemmStats {
  int64_t problems_tuned = 0;    // timed once, remembered
  int64_t problems_untimed = 0;  // the heuristic's first, remembered (M > kTunedMaxRows)
  int64_t tuned_not_first = 0;   // tuned problems where a later candidate won
  double tuning_ms = 0;          // host time spent tuning
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

  // x [m, k] bf16 (row stride p.x_row_stride), w [n, k] bf16 contiguous, out [m, n] (row stride
  // p.out_row_stride). `may_tune`: false while a graph is being captured.
  void run(const GemmProblem& p, const void* x, const void* w, void* out, bool may_tune);

  const TunedGemmStats& stats() const { return stats_; }

 private:
  struct Plan;  // cuBLASLt descriptors and the chosen algorithm of one problem
  // The problem and the operands' alignments (bytes, at most 256: the heuristic's candidates
  // depend on them).
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int>;
  std::unique_ptr<Plan> make_plan(const GemmProblem& p, int x_align, int w_align,
                                  int out_align) const;
  void tune(Plan& plan, const void* x, const void* w, void* out);
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
