// Tables and JSON for the decode benchmark; see decode_report.h.
#include "bench/decode_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>

namespace mla::bench {

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

std::string decode_table_header() {
  return fmt::format(
      "{:<9} {:>4} {:>3} {:>4} {:>15} {:>9} {:>8} {:>8} {:>8} {:>6} {:>6} {:>9} {:>10} {:>8}",
      "kernel", "b", "s_q", "h_q", "s_k", "µs", "plan µs", "GB/s", "TFLOP/s", "%copy", "%gemm",
      "FlashMLA", "× FlashMLA", "ws MB");
}

std::string decode_table_line(const DecodeBenchRow& row) {
  const std::string flashmla = row.flashmla_us ? fmt::format("{:.1f}", *row.flashmla_us) : "-";
  const std::string speedup =
      row.flashmla_us ? fmt::format("{:.2f}×", *row.flashmla_us / row.us) : "-";
  return fmt::format(
      "{:<9} {:>4} {:>3} {:>4} {:>15} {:>9.1f} {:>8.1f} {:>8.0f} {:>8.1f} {:>6.1f} {:>6.1f} {:>9} "
      "{:>10} {:>8.1f}",
      row.kernel, row.config.batch, row.config.seqlen_q, row.config.num_heads_q,
      row.config.seqlen_k_label(), row.us, row.us_plan, row.gbps, row.tflops, row.pct_copy,
      row.pct_gemm, flashmla, speedup, row.workspace_bytes / 1e6);
}

void print_decode_summary(std::FILE* out, const std::vector<DecodeBenchRow>& rows) {
  // Geometric mean of the speedup over FlashMLA (reference), per kernel, where a reference exists.
  std::map<std::string, std::pair<double, int>> log_sum;
  for (const DecodeBenchRow& row : rows) {
    if (!row.flashmla_us) continue;
    auto& [sum, count] = log_sum[row.kernel];
    sum += std::log(*row.flashmla_us / row.us);
    ++count;
  }
  for (const auto& [kernel, entry] : log_sum) {
    std::fprintf(out, "%s: geometric-mean speedup over FlashMLA (ref) on %d rows: %.2f×\n",
                 kernel.c_str(), entry.second, std::exp(entry.first / entry.second));
  }
  // And over FlashMLA timed in this run (--flashmla-same-run), with its largest output difference.
  std::map<std::string, std::pair<double, int>> same_run;
  double max_diff = 0;
  for (const DecodeBenchRow& row : rows) {
    if (row.out_rel_diff_vs_ours) max_diff = std::max(max_diff, *row.out_rel_diff_vs_ours);
    if (!row.flashmla_same_run_us) continue;
    auto& [sum, count] = same_run[row.kernel];
    sum += std::log(*row.flashmla_same_run_us / row.us);
    ++count;
  }
  for (const auto& [kernel, entry] : same_run) {
    std::fprintf(
        out,
        "%s: geometric-mean speedup over FlashMLA (same run) on %d rows: %.3f× (FlashMLA's "
        "output differs from ours by at most %.2e of the largest |out|)\n",
        kernel.c_str(), entry.second, std::exp(entry.first / entry.second), max_diff);
  }
}

nlohmann::json decode_bench_json(const BenchRunInfo& info, const Ceilings& ceilings,
                                 const std::vector<DecodeBenchRow>& rows) {
  nlohmann::json json;
  json["what"] =
      "mla.cpp MLA decode (paged cache 64, d_qk 576, d_v 512, h_kv 1, causal); median of "
      "event-timed runs, 256 MB L2 flush between runs, plan timed apart";
  json["gpu"] = info.gpu;
  json["date"] = info.date;
  json["commit"] = info.commit;
  json["flashmla_reference"] = info.flashmla_reference;
  json["ceilings_same_run"] = {{"copy_GBps_read_plus_write", ceilings.copy_gbps},
                               {"bf16_gemm_8192_TFLOPS", ceilings.gemm_tflops},
                               {"one_block_kernel_us", ceilings.launch_floor_us}};
  json["formulas"] = {{"bytes", "b*(s_q*h_q*576*2 + mean_s_k*576*2 + s_q*h_q*512*2)"},
                      {"flops", "2*b*s_q*h_q*mean_s_k*(576+512)"}};
  nlohmann::json out_rows = nlohmann::json::array();
  for (const DecodeBenchRow& row : rows) {
    nlohmann::json r = {{"kernel", row.kernel},
                        {"b", row.config.batch},
                        {"s_q", row.config.seqlen_q},
                        {"h_q", row.config.num_heads_q},
                        {"s_k", row.config.seqlen_k_label()},
                        {"mean_s_k", row.mean_seqlen_k},
                        {"us", row.us},
                        {"us_plan", row.us_plan},
                        {"GBps", row.gbps},
                        {"TFLOPS", row.tflops},
                        {"pct_copy", row.pct_copy},
                        {"pct_gemm", row.pct_gemm},
                        {"workspace_bytes", row.workspace_bytes}};
    if (row.flashmla_us) {
      r["flashmla_us"] = *row.flashmla_us;
      r["speedup_vs_flashmla"] = *row.flashmla_us / row.us;
    }
    if (row.flashmla_same_run_us) {
      r["flashmla_same_run_us"] = *row.flashmla_same_run_us;
      r["speedup_vs_flashmla_same_run"] = *row.flashmla_same_run_us / row.us;
    }
    if (row.out_rel_diff_vs_ours) r["out_rel_diff_vs_ours"] = *row.out_rel_diff_vs_ours;
    out_rows.push_back(r);
  }
  json["rows"] = out_rows;
  return json;
}

}  // namespace mla::bench
