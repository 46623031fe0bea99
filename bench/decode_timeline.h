// One decode launch's phase timeline: launch_mla_decode_with_timeline() between two timestamp
// kernels, after the same L2 flush as the timed runs. When each CTA of the split-KV grid reached
// each phase (%globaltimer, from the stamp before the op), and how long each phase took inside a
// CTA (clock64 at the SM's maximum clock), and when the launched combine's CTAs start, pass their
// wait for the split grid and end; medians over runs. The 16-row body and kFast's seesaw
// (pairs or P·V first, launched combine) record: kernels::decode_timeline_applies().
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "mla/kernels/mla_decode.h"

namespace mla::bench {

struct DecodeTimeline {
  int ctas = 0;            // of the split-KV grid
  int ctas_with_work = 0;  // that had a piece
  // Per phase: {min, median, max} over the CTAs that reached it, µs after the stamp before the op.
  std::array<std::array<double, 3>, kernels::kDecodeTimelineSlots> reached_us{};
  // Per phase i ≥ 1: median over CTAs with work of (phase i − phase i−1), clock64 → µs.
  std::array<double, kernels::kDecodeTimelineSlots> phase_us{};
  double op_end_us = 0;  // the stamp after the op (the combine, if launched, is done by then)
  // The rate of clock64 from entry to exit: cycles over %globaltimer ns (median over the CTAs with
  // work, then over runs), MHz. Read as the SM clock only where the SMs never wait: whether
  // clock64 advances while an SM waits is not settled (docs/kernels/mla_decode.md, "Twenty-fourth
  // session", item 4).
  double clock64_rate_mhz = 0;
  // The launched combine's CTAs that stamped (0 with the fused combine), and per combine slot
  // (start, past the wait for the split grid, thread 0's end: its warp's, or the CTA's in the
  // one-wave combine) {min, median, max} µs after the stamp before the op.
  int combine_ctas = 0;
  std::array<std::array<double, 3>, kernels::kDecodeCombineTimelineSlots> combine_us{};
  // Is a CTA's finish ("pages computed") slow or fast by where it runs? Over the CTAs with work:
  // the median over pairs of consecutive runs of the Pearson correlation of their finish times
  // (NaN with fewer than two runs, or when no pair had two CTAs with work to compare), the spread
  // (max − min) of each CTA's finish time averaged over the runs, and the median over runs of one
  // run's spread. A correlation near 1 and the two spreads alike: the same CTAs are slow in every
  // run; near 0: it changes from run to run (the block scheduler need not place a CTA on the same
  // SM each run, hence the same keyed by SM below).
  int finish_runs = 0;
  double finish_correlation = 0;
  double finish_spread_of_means_us = 0;
  double finish_spread_us = 0;
  // The same keyed by the SM each CTA ran on (%smid, recorded by the kernel): whether slowness
  // follows the SM rather than the CTA's work.
  double finish_correlation_by_sm = 0;
  double finish_spread_of_sm_means_us = 0;
  // A streaming kernel on every SM at once (mla/kernels/sm_stream.h), right after: each SM's rate
  // (GB/s; min / median / max over SMs of the per-SM means over the runs), its run-to-run
  // correlation by SM, and the correlation over SMs of an SM's mean rate with its mean decode
  // finish time (negative: the SMs that stream slower finish the decode later).
  int stream_runs = 0;
  std::array<double, 3> stream_rate_gbps{};
  double stream_correlation_by_sm = 0;
  double stream_rate_vs_finish_correlation = 0;
};

// params: a planned decode (launch_mla_decode_plan already run on `stream`).
DecodeTimeline capture_decode_timeline(const kernels::MlaDecodeParams& params, int runs,
                                       int sm_clock_khz, cudaStream_t stream);

// A few lines of text: the phases' times after the stamp and their durations inside a CTA.
std::string format_decode_timeline(const DecodeTimeline& timeline, const std::string& label);

}  // namespace mla::bench
