// `mla bench decode`: the decode kernel sweep with the same run's ceilings (see bench/); the
// whole-model benchmarks (throughput, step) are in cmd_bench_model.cpp.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "core/error.h"
#include "tools/mla/commands.h"
#if MLA_WITH_CUDA
#include "bench/ceilings.h"
#include "bench/decode_bench.h"
#include "bench/decode_report.h"
#include "bench/flashmla_same_run.h"
#include "bench/prefill_bench.h"
#include "cuda/device.h"
#endif

namespace mla::tools {
namespace {

struct BenchDecodeOptions {
  bool quick = false;
  int runs = 30;
  std::string json_path;
  std::string flashmla_ref = MLA_SOURCE_DIR "/bench/reference/flashmla-h200.json";
  std::string commit = "unknown";
  std::string kernel = "all";
  std::string only;  // "b,s_q,h_q,s_k" (s_k 0 = varlen)
  bool timeline = false;
  bool pair_trace = false;
  int pair_trace_piece = 0;
  bool flashmla_same_run = false;
  int page_pool = 0;
};

void run_bench_decode(const BenchDecodeOptions& options) {
  if (options.page_pool > 0 && !options.json_path.empty())
    throw_error(
        "--page-pool is a diagnostic (every page drawn from a pool of {}); its times are not "
        "benchmark figures, so it cannot be combined with --json",
        options.page_pool);
#if MLA_WITH_CUDA
  if (cuda::device_count() == 0)
    throw_error(
        "`mla bench decode` needs a CUDA GPU and none was found (try `mla demo` on the CPU)");
  const cuda::DeviceInfo device = cuda::current_device_info();
  fmt::print("GPU: {}, SM clock max {} MHz, memory clock {} MHz\n", cuda::describe(device),
             device.sm_clock_khz / 1000, device.memory_clock_khz / 1000);
  if (device.compute_major != 9)
    throw_error("the decode kernels need an sm_90 GPU (H100/H200); found sm_{}{}",
                device.compute_major, device.compute_minor);

  bench::DecodeBenchOptions bench_options;
  bench_options.quick = options.quick;
  bench_options.flashmla_same_run = options.flashmla_same_run;
  if (options.flashmla_same_run && !bench::FlashMlaSameRun::available())
    throw_error("--flashmla-same-run: {}", bench::kFlashMlaBuildHint);
  bench_options.runs = options.quick ? std::min(options.runs, 10) : options.runs;
  using kernels::MlaDecodeKernel;
  if (options.kernel == "all") {
    bench_options.kernels = {MlaDecodeKernel::kBaseline, MlaDecodeKernel::kFast};
  } else if (options.kernel == "baseline") {
    bench_options.kernels = {MlaDecodeKernel::kBaseline};
  } else if (options.kernel == "fast") {
    bench_options.kernels = {MlaDecodeKernel::kFast};
  } else if (options.kernel == "seesaw-ab") {  // kFast's 64-row bodies side by side
    bench_options.kernels = {MlaDecodeKernel::kBaseline, MlaDecodeKernel::kFast};
    bench_options.fast_schedules = {
        kernels::MlaDecodeSchedule::kLockstep, kernels::MlaDecodeSchedule::kSeesawSFirst,
        kernels::MlaDecodeSchedule::kSeesawPvFirst, kernels::MlaDecodeSchedule::kSeesawPairs};
  } else if (options.kernel == "combine-ab") {  // kFast's two combines side by side
    bench_options.kernels = {MlaDecodeKernel::kBaseline, MlaDecodeKernel::kFast};
    bench_options.fast_combines = {kernels::MlaDecodeCombine::kAuto,
                                   kernels::MlaDecodeCombine::kFused,
                                   kernels::MlaDecodeCombine::kLaunched};
  } else if (options.kernel == "flashmla") {  // FlashMLA alone, e.g. to read its power draw
    if (!bench::FlashMlaSameRun::available())
      throw_error("--kernel flashmla: {}", bench::kFlashMlaBuildHint);
    bench_options.kernels = {};
    bench_options.flashmla_same_run = true;
  } else {
    throw_error(
        "--kernel must be one of: all, baseline, fast, seesaw-ab, combine-ab, flashmla; got '{}'",
        options.kernel);
  }

  bench_options.page_pool = options.page_pool;
  if (options.page_pool > 0) {
    fmt::print(
        "Diagnostic: every block-table entry is one of the first {} cache pages ({:.1f} MB); "
        "GB/s counts every page as if distinct\n",
        options.page_pool,
        options.page_pool * double(kernels::kPageSize) * kernels::kHeadDimQK * sizeof(bf16) / 1e6);
  }
  if (options.timeline)
    bench_options.timeline_sink = [](const std::string& text) { fmt::print("{}", text); };
  if (options.pair_trace)
    bench_options.pair_trace_sink = [](const std::string& text) { fmt::print("{}", text); };
  bench_options.pair_trace_piece = options.pair_trace_piece;
  if (!options.only.empty()) {
    bench::DecodeBenchCase only;
    if (std::sscanf(options.only.c_str(), "%d,%d,%d,%d", &only.batch, &only.seqlen_q,
                    &only.num_heads_q, &only.seqlen_k) != 4 ||
        only.batch < 1 || only.seqlen_q < 1 || only.num_heads_q < 1 || only.seqlen_k < 0)
      throw_error("--only wants b,s_q,h_q,s_k (s_k 0 for lengths uniform in [1, 8192]), got '{}'",
                  options.only);
    only.varlen = only.seqlen_k == 0;
    bench_options.only = only;
  }

  std::unique_ptr<bench::FlashMlaReference> reference;
  if (!options.flashmla_ref.empty()) {
    reference = std::make_unique<bench::FlashMlaReference>(
        bench::load_flashmla_reference(options.flashmla_ref));
    fmt::print("FlashMLA reference: {} ({}, {}, FlashMLA {})\n", options.flashmla_ref,
               reference->gpu, reference->date, reference->commit.substr(0, 12));
  }

  fmt::print("Measuring ceilings (device-to-device copy, cuBLAS bf16 8192³ GEMM)...\n");
  const bench::Ceilings ceilings = bench::measure_ceilings(nullptr, options.quick ? 10 : 20);
  fmt::print(
      "Ceilings (this run): copy {:.0f} GB/s (read + write), bf16 GEMM {:.0f} TFLOP/s; a one-block "
      "kernel timed the same way {:.1f} µs\n\n",
      ceilings.copy_gbps, ceilings.gemm_tflops, ceilings.launch_floor_us);

  fmt::print("{}\n", bench::decode_table_header());
  const std::vector<bench::DecodeBenchRow> rows =
      bench::run_decode_bench(bench_options, ceilings, reference.get(), nullptr,
                              [](size_t done, size_t total, const bench::DecodeBenchRow& row) {
                                fmt::print("{}\n", bench::decode_table_line(row));
                                std::fprintf(stderr, "[%zu/%zu]\r", done, total);
                                std::fflush(stdout);
                              });
  std::fprintf(stderr, "\n");
  bench::print_decode_summary(stdout, rows);
  fmt::print(
      "× FlashMLA = FlashMLA's H200 time (reference file, not this run) / ours: above 1 is "
      "faster.\n");

  if (!options.json_path.empty()) {
    bench::BenchRunInfo info;
    info.gpu = cuda::describe(device);
    info.date = bench::utc_now_iso8601();
    info.commit = options.commit;
    if (reference)
      info.flashmla_reference = fmt::format("{} ({}, FlashMLA {})", options.flashmla_ref,
                                            reference->date, reference->commit);
    std::ofstream file(options.json_path);
    if (!file) throw_error("cannot write {}", options.json_path);
    file << bench::decode_bench_json(info, ceilings, rows).dump(1) << "\n";
    fmt::print("wrote {}\n", options.json_path);
  }
#else
  throw_error(
      "this build has no CUDA, so there is nothing to benchmark (configure with nvcc on PATH)");
#endif
}

struct BenchPrefillOptions {
  int runs = 20;
  std::string json_path;
  std::string commit = "unknown";
  std::string only;  // "heads,seqlen,batch"
  int tile_rows = 0;
};

void run_bench_prefill(const BenchPrefillOptions& options) {
#if MLA_WITH_CUDA
  if (cuda::device_count() == 0)
    throw_error("`mla bench prefill` needs a CUDA GPU and none was found");
  const cuda::DeviceInfo device = cuda::current_device_info();
  fmt::print("GPU: {}\n", cuda::describe(device));
  if (device.compute_major != 9)
    throw_error("the prefill kernels are built for sm_90a (H100/H200); found sm_{}{}",
                device.compute_major, device.compute_minor);
  bench::PrefillBenchOptions bench_options;
  bench_options.runs = options.runs;
  bench_options.tile_rows = options.tile_rows;
  if (!options.only.empty()) {
    bench::PrefillBenchCase only;
    if (std::sscanf(options.only.c_str(), "%d,%d,%d", &only.num_heads, &only.seqlen, &only.batch) !=
            3 ||
        only.num_heads < 1 || only.seqlen < 1 || only.batch < 1)
      throw_error("--only wants heads,seqlen,batch (all >= 1), got '{}'", options.only);
    bench_options.only = only;
  }
  fmt::print(
      "causal spans, d_qk 192 / d_v 128, median of {} runs, L2 flushed; causal FLOPs "
      "counted as half\n{}\n",
      options.runs, bench::prefill_table_header());
  std::vector<bench::PrefillBenchRow> rows = bench::run_prefill_bench(bench_options, nullptr);
  for (const bench::PrefillBenchRow& row : rows) fmt::print("{}\n", bench::prefill_table_line(row));
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    if (!file) throw_error("cannot write {}", options.json_path);
    file << bench::prefill_bench_json(cuda::describe(device), bench::utc_now_iso8601(),
                                      options.commit, rows)
                .dump(1)
         << "\n";
    fmt::print("wrote {}\n", options.json_path);
  }
#else
  (void)options;
  throw_error(
      "this build has no CUDA, so there is nothing to benchmark (configure with nvcc on PATH)");
#endif
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (GPU)");
  bench->require_subcommand(1);
  auto options = std::make_shared<BenchDecodeOptions>();
  CLI::App* decode = bench->add_subcommand(
      "decode", "MLA decode kernel sweep vs the measured ceilings and FlashMLA");
  decode->add_flag("--quick", options->quick, "A few representative rows, fewer runs");
  decode->add_option("--runs", options->runs, "Timed runs per row (median reported)")
      ->check(CLI::Range(1, 100000));
  decode->add_option("--json", options->json_path, "Also write the results as JSON to this file");
  decode->add_option("--flashmla-ref", options->flashmla_ref,
                     "FlashMLA reference times (JSON); empty for none");
  decode->add_option("--commit", options->commit, "Commit id recorded in the JSON");
  decode->add_option("--only", options->only,
                     "One configuration b,s_q,h_q,s_k instead of the sweep");
  decode->add_flag("--timeline", options->timeline,
                   "Also print each fast row's phase timeline (the 16-row body, or the seesaw's "
                   "pairs or P·V-first order: when its CTAs reach each phase, and how long the "
                   "phases take)");
  decode->add_flag("--pair-trace", options->pair_trace,
                   "Also print each fast row's per-pair trace where it runs the seesaw pairs order "
                   "(when each warpgroup reaches each step of a pair: medians over the CTAs, "
                   "each CTA's first piece unless --pair-trace-piece)");
  decode
      ->add_option("--pair-trace-piece", options->pair_trace_piece,
                   "With --pair-trace: which piece of each CTA to record (0: its first)")
      ->check(CLI::NonNegativeNumber);
  decode->add_flag("--flashmla-same-run", options->flashmla_same_run,
                   "Also time DeepSeek FlashMLA's dense sm90 decode in this run, interleaved with "
                   "ours (rows \"flashmla\"; a build with MLA_FLASHMLA_DIR)");
  decode
      ->add_option("--page-pool", options->page_pool,
                   "Diagnostic: every sequence's pages drawn from the first N pages of the "
                   "cache (small N: L2-resident, no DRAM latency); GB/s still counts every page")
      ->check(CLI::Range(0, 1 << 30));
  decode->add_option(
      "--kernel", options->kernel,
      "Which kernel(s): all, baseline, fast, seesaw-ab (baseline, fast_lockstep, "
      "fast_seesaw_s_first, fast_seesaw_pv_first, fast_seesaw_pairs interleaved), combine-ab "
      "(baseline, fast, fast_fused, fast_launched interleaved), flashmla (DeepSeek FlashMLA "
      "alone; a build with MLA_FLASHMLA_DIR)");
  decode->callback([options] { run_bench_decode(*options); });

  auto prefill_options = std::make_shared<BenchPrefillOptions>();
  CLI::App* prefill = bench->add_subcommand(
      "prefill", "Prefill attention (192/128, causal) at heads 16 and 128, ~16k tokens");
  prefill->add_option("--runs", prefill_options->runs, "Timed runs per row (median reported)")
      ->check(CLI::Range(1, 100000));
  prefill->add_option("--json", prefill_options->json_path,
                      "Also write the results as JSON to this file");
  prefill->add_option("--commit", prefill_options->commit, "Commit id recorded in the JSON");
  prefill->add_option("--only", prefill_options->only,
                      "One configuration heads,seqlen,batch instead of the sweep");
  prefill
      ->add_option("--tile-rows", prefill_options->tile_rows,
                   "Force the CTA shape: 64 or 128 query rows (0: automatic)")
      ->check(CLI::IsMember({0, 64, 128}));
  prefill->callback([prefill_options] { run_bench_prefill(*prefill_options); });

  add_bench_model_commands(bench);
}

}  // namespace mla::tools
