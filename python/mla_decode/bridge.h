// The plain-C++ half of the PyTorch binding: our decode host API with its errors turned into
// standard exceptions, which pybind11 maps to Python's: std::invalid_argument → ValueError (a bad
// argument; the message names it, the expected and the actual value), any other std::exception →
// RuntimeError (a CUDA failure, a GPU that is not sm_90, a broken invariant).
//
// Kept apart from binding.cpp on purpose: torch ships its own fmt headers, so the file that
// includes torch must not include core/error.h (our fmt), and this half never includes torch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "mla/kernels/mla_decode.h"

namespace mla::python {

// The device's facts, cached per device index; throws std::runtime_error unless it is sm_90.
const kernels::DecodeDeviceFacts& decode_device_facts(int device_index);

struct MetadataLayout {
  int64_t ints = 0;               // the workspace in int32 (tile_scheduler_metadata.numel())
  int64_t num_splits_offset = 0;  // where the plan's split_begin[b + 1] starts, in int32
  int num_parts = 0;              // split-KV partitions per kv head and row tile
  int rows_per_tile = 0;          // query rows per CTA (the plan's pieces depend on it)
  int max_splits = 0;             // batch + num_parts
};
MetadataLayout metadata_layout(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                               int num_sms);

// Validate (std::invalid_argument), then launch on `stream` (std::runtime_error).
void plan(const kernels::MlaDecodePlanParams& params, const kernels::DecodeDeviceFacts& device,
          cudaStream_t stream);
void decode(const kernels::MlaDecodeParams& params, const kernels::DecodeDeviceFacts& device,
            cudaStream_t stream);

}  // namespace mla::python
