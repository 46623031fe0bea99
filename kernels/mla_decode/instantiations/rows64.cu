// Baseline MLA decode kernel, tiles of 64 query rows.
#include "mla_decode/splitkv_mma.cuh"

namespace mla::kernels::decode {
template void launch_splitkv_mma<64>(const DecodeKernelArgs& args, cudaStream_t stream);
}  // namespace mla::kernels::decode
