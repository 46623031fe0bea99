// DeepSeek FlashMLA's dense sm90 decode, run beside ours in `mla bench decode --flashmla-same-run`
// for a same-run comparison. FlashMLA's source never enters this repository: the build compiles it
// from a checkout given by the CMake cache path MLA_FLASHMLA_DIR (an ignored folder, filled by
// scripts/gpu/flashmla-bundle.sh). Without it, constructing a FlashMlaSameRun throws an error that
// says how to build it in.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "core/dtypes.h"

namespace mla::bench {

// What to do in a build without FlashMLA (the error of FlashMlaSameRun's constructor there, and of
// `mla bench decode --flashmla-same-run`).
inline constexpr const char* kFlashMlaBuildHint =
    "this build has no FlashMLA: run scripts/gpu/flashmla-bundle.sh, then configure with "
    "-DMLA_FLASHMLA_DIR=<repo>/.carry/flashmla (scripts/gpu/check.sh does when it exists)";

// One decode problem in our layouts (h_kv = 1, 64-token pages): q [b, s_q, h_q, 576] bf16, the
// cache [num_pages, 64, 576] bf16, block_table [b, max_pages] int32, seqlens [b] int32 (device).
struct FlashMlaProblem {
  int batch = 0;
  int seqlen_q = 1;
  int num_heads_q = 0;
  int num_pages = 0;
  int max_pages_per_seq = 0;
  float softmax_scale = 0.f;
  bool causal = true;
  int num_sms = 0;
  const void* q = nullptr;
  const void* kv_cache = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* seqlens = nullptr;
};

class FlashMlaSameRun {
 public:
  // Whether this build has FlashMLA in it.
  static bool available();
  // Allocates FlashMLA's outputs and split buffers and runs its scheduler metadata kernel once
  // (as its own benchmark does, outside the timed calls); throws when !available().
  FlashMlaSameRun(const FlashMlaProblem& problem, cudaStream_t stream);
  ~FlashMlaSameRun();
  FlashMlaSameRun(const FlashMlaSameRun&) = delete;
  FlashMlaSameRun& operator=(const FlashMlaSameRun&) = delete;

  // The timed work: FlashMLA's split-KV kernel and its combine.
  void run(cudaStream_t stream);
  // Its output, [b, s_q, h_q, 512] (our layout), valid after run().
  const bf16* out() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mla::bench
