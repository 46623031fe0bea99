// The seesaw pairs order's per-pair timeline: launch_mla_decode_with_pair_trace() after the same L2
// flush as the timed runs; for piece number `piece` of every CTA, when each warpgroup reaches each
// step of a pair, in cycles after warpgroup 0's start of that pair (medians over each CTA's pairs
// after the first, then over the CTAs and runs), and the pair's period: its median and spread over
// the CTAs, and CTA (0, 0)'s. For `mla bench decode --pair-trace [--pair-trace-piece K]`.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "mla/kernels/mla_decode.h"

namespace mla::bench {

struct DecodePairTrace {
  int piece = 0;  // which piece of each CTA was recorded (0: its first)
  int ctas = 0;   // CTAs with at least one complete pair in that piece (median over runs)
  int pairs = 0;  // a CTA's pairs with every event of both warpgroups and a next pair
  double period_cycles = 0;  // warpgroup 0's start of pair i + 1 minus its start of pair i
  double period_p10_cycles = 0, period_p90_cycles = 0;  // over the CTAs and runs
  double first_cta_period_cycles = 0;                   // CTA (0, 0)'s (0 when it has no pair)
  // [warpgroup][event]: cycles after warpgroup 0's start of the pair.
  std::array<std::array<double, kernels::kDecodePairTraceEvents>, 2> event_cycles{};
};

// params: a planned decode that runs the pairs order (launch_mla_decode_plan already run).
DecodePairTrace capture_decode_pair_trace(const kernels::MlaDecodeParams& params, int runs,
                                          cudaStream_t stream, int piece = 0);

// The events of both warpgroups in time order, with cycles and µs at `sm_clock_khz`.
std::string format_decode_pair_trace(const DecodePairTrace& trace, const std::string& label,
                                     int sm_clock_khz);

}  // namespace mla::bench
