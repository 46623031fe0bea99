// `mla bench prefill`: the prefill attention (d_qk 192 / d_v 128) on causal spans of one length,
// batched to about 16k tokens, timed as the median of event-timed runs with the L2 flushed.
//
// FLOPs count what causal attention needs, not what the kernel computes: 2 · (192 + 128) · q · k
// per head for a full square, halved for causal (the diagonal tiles' masked half is not counted).
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mla::bench {

struct PrefillBenchCase {
  int num_heads = 16;
  int seqlen = 1024;  // q = k per span, causal
  int batch = 16;     // spans
  int tile_rows = 0;  // 0: the launcher's choice
};

// heads ∈ {16, 128} × seqlen ∈ {1024, 4096, 8192}, batch = 16384 / seqlen.
std::vector<PrefillBenchCase> prefill_bench_sweep();

struct PrefillBenchRow {
  PrefillBenchCase config;
  int tile_rows = 0;  // the CTA shape that ran
  double us = 0;      // median
  double flops = 0;   // causal: 2 · 320 · s² / 2 · heads · batch
  double tflops = 0;
};

struct PrefillBenchOptions {
  int runs = 20;
  std::optional<PrefillBenchCase> only;
  int tile_rows = 0;  // forced CTA shape (64 or 128); 0: the launcher's choice
};

std::vector<PrefillBenchRow> run_prefill_bench(const PrefillBenchOptions& options,
                                               cudaStream_t stream);

std::string prefill_table_header();
std::string prefill_table_line(const PrefillBenchRow& row);
nlohmann::json prefill_bench_json(const std::string& gpu, const std::string& date,
                                  const std::string& commit,
                                  const std::vector<PrefillBenchRow>& rows);

}  // namespace mla::bench
