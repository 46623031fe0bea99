// The wgmma split-KV MLA decode kernel, 64-row tiles (baseline and fast pipelines).
#include "mla_decode/splitkv_wgmma.cuh"

namespace mla::kernels::decode {
template void launch_splitkv_wgmma<false>(const DecodeKernelArgs& args, cudaStream_t stream);
template void launch_splitkv_wgmma<true>(const DecodeKernelArgs& args, cudaStream_t stream);
}  // namespace mla::kernels::decode
