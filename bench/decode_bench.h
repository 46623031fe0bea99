// `mla bench decode`: the MLA decode sweep, timed by FlashMLA's published method (median of
// event-timed runs, 256 MB L2 flush between runs, plan timed apart), with the same run's ceilings
// and DeepSeek FlashMLA's H200 times as a reference column.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "mla/kernels/mla_decode.h"

namespace mla::bench {

struct DecodeBenchCase {
  int batch = 0;
  int seqlen_q = 1;
  int num_heads_q = 16;
  int seqlen_k = 0;     // fixed length; ignored when varlen
  bool varlen = false;  // lengths uniform in [1, 8192] (seed 0)
  std::string seqlen_k_label() const;
};

// The full sweep: b ∈ {1, 8, 32, 128} × s_q ∈ {1, 2} × h_q ∈ {16, 32, 64, 128} ×
// s_k ∈ {1024, 4096, 8192, 32768}, plus varlen rows at b = 128. Quick: a few representative rows.
std::vector<DecodeBenchCase> decode_bench_sweep(bool quick);

struct DecodeBenchRow {
  DecodeBenchCase config;
  std::string kernel;
  double mean_seqlen_k = 0;
  double us = 0;       // median, plan excluded
  double us_plan = 0;  // median of the plan alone
  double bytes = 0;    // b·(s_q·h_q·576·2 + mean_s_k·576·2 + s_q·h_q·512·2)
  double flops = 0;    // 2·b·s_q·h_q·mean_s_k·(576 + 512)
  double gbps = 0;
  double tflops = 0;
  double pct_copy = 0;                // of the measured copy ceiling
  double pct_gemm = 0;                // of the measured GEMM ceiling
  std::optional<double> flashmla_us;  // DeepSeek FlashMLA on the H200, same config (reference file)
  // --flashmla-same-run: FlashMLA's median in this run, timed interleaved with ours (our rows);
  // on FlashMLA's own row ("flashmla"), max |its output − ours| / max |ours| (ours: the last
  // kernel of the row, run again after the timing).
  std::optional<double> flashmla_same_run_us;
  std::optional<double> out_rel_diff_vs_ours;
  size_t workspace_bytes = 0;
};

struct DecodeBenchOptions {
  bool quick = false;
  std::optional<DecodeBenchCase> only;  // run this one configuration instead of the sweep
  int runs = 30;
  std::vector<kernels::MlaDecodeKernel> kernels = {kernels::MlaDecodeKernel::kBaseline};
  // kFast runs once per schedule here (kAuto: row "fast"; else "fast_<schedule>"), interleaved
  // with the other kernels, for A/B measurements of the 64-row bodies in one run.
  std::vector<kernels::MlaDecodeSchedule> fast_schedules = {kernels::MlaDecodeSchedule::kAuto};
  // And once per combine of each schedule (kAuto: no suffix; else "_fused" / "_launched").
  std::vector<kernels::MlaDecodeCombine> fast_combines = {kernels::MlaDecodeCombine::kAuto};
  std::string flashmla_reference_path;  // empty: no reference column
  // DeepSeek FlashMLA's dense sm90 decode timed beside ours (needs a build with it:
  // bench/flashmla_same_run.h); its rows are named "flashmla".
  bool flashmla_same_run = false;
  bool causal = true;
  // Diagnostic: > 0 maps every block-table entry onto the first page_pool pages of the cache (a
  // small pool stays in L2), to measure the kernels without DRAM latency. Bytes and GB/s are
  // still counted as if every page were distinct.
  int page_pool = 0;
  // Set: after each row's medians, every kFast variant that records a timeline
  // (kernels::decode_timeline_applies()) also gets one (decode_timeline.h), handed over as text.
  std::function<void(const std::string&)> timeline_sink;
  // Set: after each row's medians, every kFast variant that runs the seesaw pairs order also gets
  // a per-pair trace (decode_pair_trace.h) of each CTA's piece number pair_trace_piece, handed over
  // as text.
  std::function<void(const std::string&)> pair_trace_sink;
  int pair_trace_piece = 0;
};

struct FlashMlaReference {
  std::string what;
  std::string gpu;
  std::string date;
  std::string commit;
  struct Row {
    int batch, seqlen_q, num_heads_q;
    std::string seqlen_k;  // "4096" or "uniform[1,8192]"
    double us;
  };
  std::vector<Row> rows;
  std::optional<double> lookup(const DecodeBenchCase& config) const;
};
FlashMlaReference load_flashmla_reference(const std::string& path);

using ProgressCallback = std::function<void(size_t done, size_t total, const DecodeBenchRow&)>;

std::vector<DecodeBenchRow> run_decode_bench(const DecodeBenchOptions& options,
                                             const Ceilings& ceilings,
                                             const FlashMlaReference* reference,
                                             cudaStream_t stream, const ProgressCallback& progress);

}  // namespace mla::bench
