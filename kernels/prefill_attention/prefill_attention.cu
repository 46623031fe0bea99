// The prefill attention launches (bf16; the only element type): the uncovered-row fill, then the
// span kernel. Validation lives in prefill_attention_api.cpp; this file trusts its params.
#include "cuda/check.h"
#include "prefill_attention/prefill_attention.cuh"

namespace mla::kernels::prefill {

void launch_prefill_kernels(const PrefillAttentionParams& params, const PrefillLaunchShape& shape,
                            cudaStream_t stream) {
  if (shape.fill_blocks > 0) {
    prefill_fill_uncovered_kernel<<<dim3(unsigned(shape.fill_blocks)), kFillThreads, 0, stream>>>(
        params);
    MLA_CHECK_LAUNCH("prefill_fill_uncovered");
  }
  if (shape.q_tiles > 0 && shape.spans > 0) {
    MLA_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    prefill_attention_kernel<<<dim3(shape.q_tiles, shape.spans, shape.heads), kThreads, kSmemBytes,
                               stream>>>(params);
    MLA_CHECK_LAUNCH("prefill_attention");
  }
}

}  // namespace mla::kernels::prefill
