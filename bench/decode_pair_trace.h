// The seesaw pairs order's per-pair timeline: launch_mla_decode_with_pair_trace() after the same L2
// flush as the timed runs; for piece number `piece` of every CTA, when each warpgroup reaches each
// step of a pair, in cycles after warpgroup 0's start of that pair (medians over each CTA's pairs
// after the first, then over the CTAs and runs), and the pair's period: its median and spread over
// the CTAs, and CTA (0, 0)'s; and every CTA's pieces whole: their start, pairs and epilogue, and
// the cycles a pair over the whole piece. For `mla bench decode --pair-trace
// [--pair-trace-piece K]`.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <string>
#include <vector>

#include "mla/kernels/mla_decode.h"

namespace mla::bench {

struct DecodePairTrace {
  int piece = 0;  // which piece of each CTA was recorded (0: its first)
  // CTAs with a measured pair in that piece (a pair i ≥ 1 with every event of both warpgroups
  // and a next pair started; median over runs).
  int ctas = 0;
  int pairs = 0;             // a CTA's pairs with every event of both warpgroups and a next pair
  double period_cycles = 0;  // warpgroup 0's start of pair i + 1 minus its start of pair i
  double period_p10_cycles = 0, period_p90_cycles = 0;  // over the CTAs and runs
  double first_cta_period_cycles = 0;                   // CTA (0, 0)'s (0 when it has no pair)
  // [warpgroup][event]: cycles after warpgroup 0's start of the pair.
  std::array<std::array<double, kernels::kDecodePairTraceEvents>, 2> event_cycles{};

  // The piece trace: every CTA's pieces, whole (medians over the CTAs and runs).
  struct Piece {
    int ctas = 0;                  // CTAs with this piece complete (mean per run, rounded up)
    double pages = 0;              // its pages
    double queries_cycles = 0;     // piece start (its first pages issued) to the queries in
    double first_page_cycles = 0;  // piece start to the first page's first half landed
    double pairs_cycles = 0;       // first half landed to warpgroup 0's last P·V done
    double cycles_per_pair = 0;    // pairs_cycles per two pages
    double epilogue_cycles = 0;    // that last P·V to the output or partial rows' copies issued
    double to_next_cycles = 0;     // copies issued to the next piece's start (its CTAs with one)
  };
  std::vector<Piece> pieces;  // by piece number
  // Per CTA over all its pieces (medians over the CTAs and runs): first piece's start to the
  // last one's copies issued, the share of it between a first half landing and a last P·V, and
  // the cycles a pair over all its pieces' pairs.
  double cta_cycles = 0, cta_pairs_share = 0, cta_cycles_per_pair = 0;
  double cta_pieces = 0;
  bool pieces_truncated = false;  // some CTA filled every recorded piece (it may have more)
};

// params: a planned decode that runs the pairs order (launch_mla_decode_plan already run).
DecodePairTrace capture_decode_pair_trace(const kernels::MlaDecodeParams& params, int runs,
                                          cudaStream_t stream, int piece = 0);

// The events of both warpgroups in time order, with cycles and µs at `sm_clock_khz`.
std::string format_decode_pair_trace(const DecodePairTrace& trace, const std::string& label,
                                     int sm_clock_khz);

}  // namespace mla::bench
