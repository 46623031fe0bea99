// The prefill attention launches (bf16; the only element type): the uncovered-row fill, then the
// span kernel. Validation lives in prefill_attention_api.cpp; this file trusts its params.
#include "cuda/check.h"
#include "prefill_attention/prefill_attention.cuh"

namespace mla::kernels::prefill {

namespace {

template <class Tile>
void launch_span_kernel(const PrefillAttentionParams& params, const PrefillLaunchShape& shape,
                        cudaStream_t stream) {
  MLA_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<Tile>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      Tile::kSmemBytes));
  prefill_attention_kernel<Tile>
      <<<dim3(shape.q_tiles, shape.spans, shape.heads), Tile::kThreads, Tile::kSmemBytes, stream>>>(
          params);
  MLA_CHECK_LAUNCH("prefill_attention");
}

}  // namespace

void launch_prefill_kernels(const PrefillAttentionParams& params, const PrefillLaunchShape& shape,
                            cudaStream_t stream) {
  if (shape.fill_blocks > 0) {
    prefill_fill_uncovered_kernel<<<dim3(unsigned(shape.fill_blocks)), kFillThreads, 0, stream>>>(
        params);
    MLA_CHECK_LAUNCH("prefill_fill_uncovered");
  }
  if (shape.q_tiles == 0 || shape.spans == 0) return;
  if (shape.tile_rows == LargeTile::kBlockM)
    launch_span_kernel<LargeTile>(params, shape, stream);
  else
    launch_span_kernel<SmallTile>(params, shape, stream);
}

}  // namespace mla::kernels::prefill
