// mma.sync MLA decode kernel, tiles of 16 query rows (baseline and fast pipelines).
#include "mla_decode/splitkv_mma.cuh"

namespace mla::kernels::decode {
template void launch_splitkv_mma<16, false>(const DecodeKernelArgs& args, cudaStream_t stream);
template void launch_splitkv_mma<16, true>(const DecodeKernelArgs& args, cudaStream_t stream);
}  // namespace mla::kernels::decode
