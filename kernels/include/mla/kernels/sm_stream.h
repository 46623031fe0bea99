// A diagnostic: how fast each SM takes in memory while every SM streams at once. `mla bench decode
// --timeline` compares it with the decode's finish times per SM: the groundwork of a plan weighted
// by SM (docs/kernels/mla_decode.md, the seventeenth session). One CTA per SM reads its own slice
// of a buffer with many 16-byte loads in flight per thread, and records its SM id (%smid),
// %globaltimer before its first load and after its last, and the XOR of the 64-bit words it read
// (so the loads cannot be dropped, and a test can check them against the host twin below).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mla::kernels {

inline constexpr int kSmStreamRecordWords = 4;  // per CTA: SM id, start ns, end ns, checksum

// `ctas` CTAs, each taking most of an SM's shared memory so that no SM holds two; CTA i reads the
// 8-byte words [i · words_per_cta, (i + 1) · words_per_cta) of `src` (words_per_cta even, `src`
// 16-byte aligned) and writes records[i · kSmStreamRecordWords + 0..3].
void launch_sm_stream(const uint64_t* src, size_t words_per_cta, int ctas, uint64_t* records,
                      cudaStream_t stream);

// The checksum a CTA records for its words (the host twin).
inline uint64_t sm_stream_checksum_host(const uint64_t* words, size_t count) {
  uint64_t checksum = 0;
  for (size_t i = 0; i < count; ++i) checksum ^= words[i];
  return checksum;
}

}  // namespace mla::kernels
