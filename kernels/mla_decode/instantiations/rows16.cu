// mma.sync MLA decode kernel, tiles of 16 query rows.
#include "mla_decode/splitkv_mma.cuh"

namespace mla::kernels::decode {
template void launch_splitkv_mma<16>(const DecodeKernelArgs& args, bool fused_combine,
                                     cudaStream_t stream);
}  // namespace mla::kernels::decode
