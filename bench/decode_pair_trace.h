// The seesaw pairs order's per-pair timeline: launch_mla_decode_with_pair_trace() after the same L2
// flush as the timed runs; for CTA (0, 0)'s first piece, when each warpgroup reaches each step of a
// pair, in cycles after warpgroup 0's start of that pair (medians over the pairs after the first,
// then over runs), and the pair's period. For `mla bench decode --pair-trace`.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "mla/kernels/mla_decode.h"

namespace mla::bench {

struct DecodePairTrace {
  int pairs = 0;             // pairs with every event of both warpgroups and a next pair (median)
  double period_cycles = 0;  // warpgroup 0's start of pair i + 1 minus its start of pair i
  // [warpgroup][event]: cycles after warpgroup 0's start of the pair.
  std::array<std::array<double, kernels::kDecodePairTraceEvents>, 2> event_cycles{};
};

// params: a planned decode that runs the pairs order (launch_mla_decode_plan already run).
DecodePairTrace capture_decode_pair_trace(const kernels::MlaDecodeParams& params, int runs,
                                          cudaStream_t stream);

// The events of both warpgroups in time order, with cycles and µs at `sm_clock_khz`.
std::string format_decode_pair_trace(const DecodePairTrace& trace, const std::string& label,
                                     int sm_clock_khz);

}  // namespace mla::bench
