// make_tensor_map_bf16(); see tensor_map.h.
#include "cuda/tensor_map.h"

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace mla::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t error = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer,
                                                               12000, cudaEnableDefault, &status);
    if (error != cudaSuccess || status != cudaDriverEntryPointSuccess || pointer == nullptr)
      throw Error("cannot find the driver's cuTensorMapEncodeTiled (needs a CUDA 12+ driver)");
    return reinterpret_cast<EncodeTiled>(pointer);
  }();
  return function;
}

}  // namespace

CUtensorMap make_tensor_map_bf16(const TensorMapBf16Spec& spec) {
  MLA_CHECK(spec.rank >= 1 && spec.rank <= 5);
  CUtensorMap map{};
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult result =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(spec.rank),
                     const_cast<void*>(spec.base), spec.dims, spec.strides_bytes, spec.box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     spec.swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(fmt::format(
        "cuTensorMapEncodeTiled failed (CUresult {}) for a rank-{} bf16 map: dims [{}, {}, {}, {}, "
        "{}], byte strides [{}, {}, {}, {}], box [{}, {}, {}, {}, {}] (strides must be multiples "
        "of 16 bytes, the base 16-byte aligned)",
        static_cast<int>(result), spec.rank, spec.dims[0], spec.dims[1], spec.dims[2], spec.dims[3],
        spec.dims[4], spec.strides_bytes[0], spec.strides_bytes[1], spec.strides_bytes[2],
        spec.strides_bytes[3], spec.box[0], spec.box[1], spec.box[2], spec.box[3], spec.box[4]));
  }
  return map;
}

}  // namespace mla::cuda
