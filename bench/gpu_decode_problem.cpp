// GpuDecodeProblem; see gpu_decode_problem.h.
#include "bench/gpu_decode_problem.h"

#include "core/dtypes.h"
#include "core/error.h"

namespace mla::bench {

GpuDecodeProblem::GpuDecodeProblem(const ref::PagedDecodeProblem& problem, int num_sms)
    : host_(problem),
      num_sms_(num_sms),
      q_(problem.q.size()),
      kv_cache_(problem.kv_cache.size()),
      out_(size_t(problem.batch) * problem.spec.seqlen_q * problem.spec.num_heads_q *
           kernels::kHeadDimV),
      block_table_(problem.block_table.size()),
      seqlens_(problem.seqlens.size()),
      lse_(size_t(problem.batch) * problem.spec.num_heads_q * problem.spec.seqlen_q),
      workspace_(kernels::mla_decode_workspace_size(problem.batch, problem.spec.seqlen_q,
                                                    problem.spec.num_heads_q,
                                                    problem.spec.num_heads_kv, num_sms)) {
  q_.copy_from_host(problem.q);
  kv_cache_.copy_from_host(problem.kv_cache);
  block_table_.copy_from_host(problem.block_table);
  seqlens_.copy_from_host(problem.seqlens);
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
}

kernels::MlaDecodePlanParams GpuDecodeProblem::plan_params() const {
  kernels::MlaDecodePlanParams p;
  p.seqlens = seqlens_.data();
  p.batch = host_.batch;
  p.seqlen_q = host_.spec.seqlen_q;
  p.num_heads_q = host_.spec.num_heads_q;
  p.num_heads_kv = host_.spec.num_heads_kv;
  p.num_sms = num_sms_;
  p.max_pages_per_seq = host_.max_pages_per_seq;
  p.workspace = workspace_.data();
  p.workspace_bytes = workspace_.bytes();
  return p;
}

kernels::MlaDecodeParams GpuDecodeProblem::decode_params() const {
  kernels::MlaDecodeParams p;
  p.batch = host_.batch;
  p.seqlen_q = host_.spec.seqlen_q;
  p.num_heads_q = host_.spec.num_heads_q;
  p.num_heads_kv = host_.spec.num_heads_kv;
  p.num_pages = host_.num_pages;
  p.max_pages_per_seq = host_.max_pages_per_seq;
  p.softmax_scale = host_.spec.softmax_scale;
  p.causal = host_.spec.causal;
  p.q = q_.data();
  p.kv_cache = kv_cache_.data();
  p.block_table = block_table_.data();
  p.seqlens = seqlens_.data();
  p.out = out_.data();
  p.lse = lse_.data();
  p.num_sms = num_sms_;
  p.workspace = workspace_.data();
  p.workspace_bytes = workspace_.bytes();
  p.set_contiguous_strides();
  return p;
}

void GpuDecodeProblem::poison_outputs(cudaStream_t stream) {
  if (out_.bytes() > 0) MLA_CUDA_CHECK(cudaMemsetAsync(out_.data(), 0xff, out_.bytes(), stream));
  if (lse_.bytes() > 0) MLA_CUDA_CHECK(cudaMemsetAsync(lse_.data(), 0xff, lse_.bytes(), stream));
}

void GpuDecodeProblem::set_seqlens(const std::vector<int32_t>& seqlens, cudaStream_t stream) {
  MLA_CHECK_EQ(seqlens.size(), host_.seqlens.size());
  host_.seqlens = seqlens;
  seqlens_.copy_from_host(host_.seqlens, stream);
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

DecodeOutputs GpuDecodeProblem::run(cudaStream_t stream, kernels::MlaDecodeKernel kernel) {
  poison_outputs(stream);
  kernels::launch_mla_decode_plan(plan_params(), stream);
  kernels::MlaDecodeParams params = decode_params();
  params.kernel = kernel;
  kernels::launch_mla_decode(params, stream);
  return fetch(stream);
}

DecodeOutputs GpuDecodeProblem::fetch(cudaStream_t stream) const {
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
  DecodeOutputs outputs;
  const std::vector<bf16> out = out_.to_host(stream);
  outputs.out.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) outputs.out[i] = bf16_to_float(out[i]);
  outputs.lse = lse_.to_host(stream);
  return outputs;
}

}  // namespace mla::bench
