// A paged decode problem on the GPU: device copies of a host problem, outputs and workspace, and
// the op's params filled in. Used by the GPU tests, the demo and the benchmark.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "cuda/device.h"
#include "mla/kernels/mla_decode.h"
#include "ref/paged_problem.h"

namespace mla::bench {

struct DecodeOutputs {
  std::vector<float> out;  // [b, s_q, h_q, 512] (bf16 results widened)
  std::vector<float> lse;  // [b, h_q, s_q]
};

class GpuDecodeProblem {
 public:
  GpuDecodeProblem(const ref::PagedDecodeProblem& problem, int num_sms);

  kernels::MlaDecodePlanParams plan_params() const;
  kernels::MlaDecodeParams decode_params() const;

  // Fills out and lse with NaN (0xff bytes), so an unwritten element shows.
  void poison_outputs(cudaStream_t stream);
  // Replaces the device seqlens (same batch size; the block table must cover them).
  void set_seqlens(const std::vector<int32_t>& seqlens, cudaStream_t stream);
  // poison → plan → decode, then synchronises and copies the outputs back.
  DecodeOutputs run(cudaStream_t stream, kernels::MlaDecodeKernel kernel);
  DecodeOutputs fetch(cudaStream_t stream) const;

  const ref::PagedDecodeProblem& host() const { return host_; }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  ref::PagedDecodeProblem host_;
  int num_sms_;
  cuda::DeviceBuffer<bf16> q_, kv_cache_, out_;
  cuda::DeviceBuffer<int32_t> block_table_, seqlens_;
  cuda::DeviceBuffer<float> lse_;
  cuda::DeviceBuffer<uint8_t> workspace_;
};

}  // namespace mla::bench
