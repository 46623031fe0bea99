// The sampler's workspace layout and launch constants, shared by the host checks and the kernel.
//
// Per row, one slab of sampling_row_workspace_bytes(vocab): the penalised logits [vocab] fp32,
// then per-token context counts [vocab] uint32 (bit 31: seen, low bits: generated count), which
// the kernel zeroes at the start of every launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mla/kernels/host_device.h"

namespace mla::kernels {

constexpr int kSamplingThreads = 1024;  // one CTA per row
constexpr int kSamplingRadixBits = 8;   // digits of the radix select
constexpr int kSamplingRadixBins = 1 << kSamplingRadixBits;
constexpr int64_t kSamplingMaxVocab = int64_t(1) << 23;  // fixed-point sums fit in uint64
constexpr size_t kSamplingWorkspaceAlignment = 256;
static_assert(kSamplingThreads % 32 == 0 && kSamplingThreads >= kSamplingRadixBins);
static_assert(kSamplingRadixBins == 32 * 8, "the bin scan gives each lane of one warp 8 bins");

MLA_HOST_DEVICE size_t sampling_row_workspace_bytes(int64_t vocab) {
  const size_t bytes = size_t(vocab) * (sizeof(float) + sizeof(uint32_t));
  return (bytes + kSamplingWorkspaceAlignment - 1) / kSamplingWorkspaceAlignment *
         kSamplingWorkspaceAlignment;
}

}  // namespace mla::kernels
