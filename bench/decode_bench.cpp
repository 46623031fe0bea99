// The MLA decode benchmark; see decode_bench.h.
#include "bench/decode_bench.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include "bench/decode_pair_trace.h"
#include "bench/decode_timeline.h"
#include "bench/flashmla_same_run.h"
#include "bench/timing.h"
#include "core/environment.h"
#include "core/error.h"
#include "cuda/device.h"
#include "mla/kernels/fill.h"

namespace mla::bench {

std::string DecodeBenchCase::seqlen_k_label() const {
  return varlen ? "uniform[1,8192]" : std::to_string(seqlen_k);
}

std::vector<DecodeBenchCase> decode_bench_sweep(bool quick) {
  std::vector<DecodeBenchCase> cases;
  if (quick) {
    cases.push_back({128, 1, 16, 4096, false});
    cases.push_back({32, 2, 128, 4096, false});
    cases.push_back({8, 1, 16, 4096, false});
    cases.push_back({1, 1, 16, 32768, false});
    cases.push_back({128, 1, 64, 0, true});
    return cases;
  }
  for (int batch : {1, 8, 32, 128})
    for (int seqlen_q : {1, 2})
      for (int heads : {16, 32, 64, 128})
        for (int seqlen_k : {1024, 4096, 8192, 32768})
          cases.push_back({batch, seqlen_q, heads, seqlen_k, false});
  for (int seqlen_q : {1, 2})
    for (int heads : {16, 32, 64, 128}) cases.push_back({128, seqlen_q, heads, 0, true});
  return cases;
}

std::optional<double> FlashMlaReference::lookup(const DecodeBenchCase& config) const {
  for (const Row& row : rows) {
    if (row.batch == config.batch && row.seqlen_q == config.seqlen_q &&
        row.num_heads_q == config.num_heads_q && row.seqlen_k == config.seqlen_k_label())
      return row.us;
  }
  return std::nullopt;
}

FlashMlaReference load_flashmla_reference(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw_error("cannot open the FlashMLA reference file {} (pass --flashmla-ref)", path);
  nlohmann::json json;
  try {
    file >> json;
  } catch (const std::exception& error) {
    throw_error("{}: not valid JSON: {}", path, error.what());
  }
  FlashMlaReference reference;
  reference.what = json.value("what", "");
  reference.gpu = json.value("gpu", "");
  reference.date = json.value("date", "");
  reference.commit = json.value("flashmla_commit", "");
  for (const auto& row : json.at("rows")) {
    FlashMlaReference::Row r;
    r.batch = row.at("b").get<int>();
    r.seqlen_q = row.at("s_q").get<int>();
    r.num_heads_q = row.at("h_q").get<int>();
    const auto& s_k = row.at("s_k");
    r.seqlen_k = s_k.is_string() ? s_k.get<std::string>() : std::to_string(s_k.get<int>());
    r.us = row.at("us").get<double>();
    reference.rows.push_back(r);
  }
  return reference;
}

namespace {

std::vector<int32_t> bench_seqlens(const DecodeBenchCase& config) {
  std::vector<int32_t> seqlens(config.batch, config.seqlen_k);
  if (config.varlen) {
    std::mt19937 rng(0);
    std::uniform_int_distribution<int> length(1, 8192);
    for (int32_t& len : seqlens) len = length(rng);
  }
  return seqlens;
}

// max |a − b| / max |b| over `count` bf16 values on the device (FlashMLA's output against ours).
double max_relative_difference(const bf16* a, const bf16* b, size_t count, cudaStream_t stream) {
  std::vector<bf16> host_a(count), host_b(count);
  MLA_CUDA_CHECK(
      cudaMemcpyAsync(host_a.data(), a, count * sizeof(bf16), cudaMemcpyDeviceToHost, stream));
  MLA_CUDA_CHECK(
      cudaMemcpyAsync(host_b.data(), b, count * sizeof(bf16), cudaMemcpyDeviceToHost, stream));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
  double max_diff = 0, max_b = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = bf16_to_float(host_a[i]), y = bf16_to_float(host_b[i]);
    max_diff = std::max(max_diff, std::abs(x - y));
    max_b = std::max(max_b, std::abs(y));
  }
  return max_b > 0 ? max_diff / max_b : max_diff;
}

// A row's rates from its bytes, FLOPs and time, and their shares of the run's ceilings.
void set_rates(DecodeBenchRow& row, const Ceilings& ceilings) {
  row.gbps = row.bytes / row.us * 1e-3;
  row.tflops = row.flops / row.us * 1e-6;
  row.pct_copy = 100.0 * row.gbps / ceilings.copy_gbps;
  row.pct_gemm = 100.0 * row.tflops / ceilings.gemm_tflops;
}

// MLA_BENCH_FLASHMLA_DIAGNOSE (for measuring): ours and FlashMLA's work (each enqueued on the
// stream it is given) timed more ways, printed on stdout: the host's time to enqueue one call
// (50 calls, no sync between); each alone with the event timer (not interleaved with the other)
// on the bench's stream; and, on a stream of its own (the bench's legacy default stream cannot be
// captured), each alone again and each captured once in a CUDA graph and replayed, which takes the
// host out of the timed region. A capture that fails is reported, not fatal.
using StreamWork = std::function<void(cudaStream_t)>;
void diagnose_flashmla_timing(const StreamWork& ours, const StreamWork& flashmla, EventTimer& timer,
                              int runs, cudaStream_t stream, const std::string& label) {
  auto host_us = [&](const StreamWork& work) {
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) work(stream);
    const auto end = std::chrono::steady_clock::now();
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return std::chrono::duration<double, std::micro>(end - start).count() / 50;
  };
  const double host_ours = host_us(ours), host_flashmla = host_us(flashmla);
  const double alone_ours = timer.median_us([&] { ours(stream); }, runs);
  const double alone_flashmla = timer.median_us([&] { flashmla(stream); }, runs);
  fmt::print(
      "flashmla diagnosis, {}: host µs to enqueue one call: ours {:.1f}, FlashMLA {:.1f}; alone "
      "(event-timed): ours {:.1f}, FlashMLA {:.1f}\n",
      label, host_ours, host_flashmla, alone_ours, alone_flashmla);

  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));  // a non-blocking stream does not wait for it
  cudaStream_t own;
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  {
    EventTimer own_timer(own);
    auto graph_us = [&](const StreamWork& work) -> std::string {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      std::string failure;
      if (cudaStreamBeginCapture(own, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        failure = "cudaStreamBeginCapture failed";
      } else {
        try {
          work(own);
        } catch (const std::exception& error) {
          failure = error.what();
        }
        const cudaError_t ended = cudaStreamEndCapture(own, &graph);
        if (failure.empty() && ended != cudaSuccess) failure = cudaGetErrorString(ended);
        if (failure.empty() && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
          failure = "cudaGraphInstantiate failed";
      }
      (void)cudaGetLastError();
      std::string result = "failed (" + failure + ")";
      if (failure.empty()) {
        result = fmt::format(
            "{:.1f}",
            own_timer.median_us([&] { MLA_CUDA_CHECK(cudaGraphLaunch(exec, own)); }, runs));
      }
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      if (graph != nullptr) cudaGraphDestroy(graph);
      return result;
    };
    const double own_ours = own_timer.median_us([&] { ours(own); }, runs);
    const double own_flashmla = own_timer.median_us([&] { flashmla(own); }, runs);
    const std::string graph_ours = graph_us(ours), graph_flashmla = graph_us(flashmla);
    fmt::print(
        "flashmla diagnosis, {}: on a stream of its own: alone ours {:.1f}, FlashMLA {:.1f}; CUDA "
        "graph replay ours {}, FlashMLA {}\n",
        label, own_ours, own_flashmla, graph_ours, graph_flashmla);
    MLA_CUDA_CHECK(cudaStreamSynchronize(own));
  }
  MLA_CUDA_CHECK(cudaStreamDestroy(own));
}

}  // namespace

std::vector<DecodeBenchRow> run_decode_bench(const DecodeBenchOptions& options,
                                             const Ceilings& ceilings,
                                             const FlashMlaReference* reference,
                                             cudaStream_t stream,
                                             const ProgressCallback& progress) {
  // MLA_BENCH_NUM_SMS (for measuring): the plan and the launches spread over that many SMs instead
  // of the device's, e.g. twice as many parts as SMs, which the block scheduler then hands out as
  // SMs free up (launched combines only; the fused combine needs every CTA resident).
  const int num_sms = static_cast<int>(integer_from_environment("MLA_BENCH_NUM_SMS", 1, 4096)
                                           .value_or(cuda::current_device_info().num_sms));
  const std::vector<DecodeBenchCase> cases = options.only
                                                 ? std::vector<DecodeBenchCase>{*options.only}
                                                 : decode_bench_sweep(options.quick);
  size_t per_case = 0;
  for (kernels::MlaDecodeKernel kernel : options.kernels)
    per_case += kernel == kernels::MlaDecodeKernel::kFast
                    ? options.fast_schedules.size() * options.fast_combines.size()
                    : 1;
  const size_t total = cases.size() * (per_case + (options.flashmla_same_run ? 1 : 0));
  EventTimer timer(stream);
  std::vector<DecodeBenchRow> rows;
  for (const DecodeBenchCase& config : cases) {
    const std::vector<int32_t> seqlens = bench_seqlens(config);
    const int batch = config.batch;
    std::vector<int32_t> pages_of(batch);
    int num_pages = 0, max_pages = 1;
    for (int b = 0; b < batch; ++b) {
      pages_of[b] = kernels::num_pages_of(seqlens[b]);
      num_pages += pages_of[b];
      max_pages = std::max(max_pages, pages_of[b]);
    }
    // Pages handed out in a random order, as a long-running engine's allocator would.
    std::vector<int32_t> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(1));
    std::vector<int32_t> block_table(size_t(batch) * max_pages, 0);
    for (int b = 0, next = 0; b < batch; ++b)
      for (int j = 0; j < pages_of[b]; ++j) {
        const int32_t page = order[next++];
        block_table[size_t(b) * max_pages + j] =
            options.page_pool > 0 ? page % options.page_pool : page;
      }

    const size_t q_count =
        size_t(batch) * config.seqlen_q * config.num_heads_q * kernels::kHeadDimQK;
    const size_t kv_count = size_t(num_pages) * kernels::kPageSize * kernels::kHeadDimQK;
    cuda::DeviceBuffer<bf16> q(q_count), kv(kv_count);
    cuda::DeviceBuffer<bf16> out(size_t(batch) * config.seqlen_q * config.num_heads_q *
                                 kernels::kHeadDimV);
    cuda::DeviceBuffer<float> lse(size_t(batch) * config.num_heads_q * config.seqlen_q);
    cuda::DeviceBuffer<int32_t> d_block_table(block_table.size()), d_seqlens(seqlens.size());
    d_block_table.copy_from_host(block_table, stream);
    d_seqlens.copy_from_host(seqlens, stream);
    kernels::launch_fill_random_bf16(q.data(), q_count, {1, 0.1f, 1.f}, stream);
    kernels::launch_fill_random_bf16(kv.data(), kv_count, {2, 0.1f, 1.f}, stream);
    const size_t workspace_bytes =
        kernels::mla_decode_workspace_size(batch, config.seqlen_q, config.num_heads_q, 1, num_sms);
    cuda::DeviceBuffer<uint8_t> workspace(workspace_bytes);

    kernels::MlaDecodePlanParams plan;
    plan.seqlens = d_seqlens.data();
    plan.batch = batch;
    plan.seqlen_q = config.seqlen_q;
    plan.num_heads_q = config.num_heads_q;
    plan.num_heads_kv = 1;
    plan.num_sms = num_sms;
    plan.max_pages_per_seq = max_pages;
    plan.workspace = workspace.data();
    plan.workspace_bytes = workspace_bytes;

    kernels::MlaDecodeParams params;
    params.batch = batch;
    params.seqlen_q = config.seqlen_q;
    params.num_heads_q = config.num_heads_q;
    params.num_heads_kv = 1;
    params.num_pages = num_pages;
    params.max_pages_per_seq = max_pages;
    params.softmax_scale = 0.1352337788608801f;
    params.causal = options.causal;
    params.q = q.data();
    params.kv_cache = kv.data();
    params.block_table = d_block_table.data();
    params.seqlens = d_seqlens.data();
    params.out = out.data();
    params.lse = lse.data();
    params.num_sms = num_sms;
    params.workspace = workspace.data();
    params.workspace_bytes = workspace_bytes;
    params.set_contiguous_strides();

    // At most 100 runs: decode-power.sh asks for up to 100,000 of the kernels.
    const double us_plan = timer.median_us([&] { kernels::launch_mla_decode_plan(plan, stream); },
                                           std::min(options.runs, 100));
    kernels::launch_mla_decode_plan(plan, stream);

    double mean_seqlen = 0;
    for (int32_t len : seqlens) mean_seqlen += len;
    mean_seqlen /= batch;
    const double rows_q = double(config.seqlen_q) * config.num_heads_q;
    // All kernels of this configuration timed in rotating order within each round.
    std::vector<kernels::MlaDecodeParams> variants;
    std::vector<std::string> names;
    std::vector<std::function<void()>> works;
    for (kernels::MlaDecodeKernel kernel : options.kernels) {
      const bool fast = kernel == kernels::MlaDecodeKernel::kFast;
      if (!fast) {
        variants.push_back(params);
        variants.back().kernel = kernel;
        names.push_back(kernels::to_string(kernel));
        continue;
      }
      for (kernels::MlaDecodeSchedule schedule : options.fast_schedules) {
        for (kernels::MlaDecodeCombine combine : options.fast_combines) {
          variants.push_back(params);
          variants.back().kernel = kernel;
          variants.back().schedule = schedule;
          variants.back().combine = combine;
          names.push_back(kernels::to_string(kernel));
          if (schedule != kernels::MlaDecodeSchedule::kAuto)
            names.back() += fmt::format("_{}", kernels::to_string(schedule));
          if (combine != kernels::MlaDecodeCombine::kAuto)
            names.back() += fmt::format("_{}", kernels::to_string(combine));
        }
      }
    }
    for (const kernels::MlaDecodeParams& variant : variants)
      works.push_back([&variant, stream] { kernels::launch_mla_decode(variant, stream); });
    std::unique_ptr<FlashMlaSameRun> flashmla;
    if (options.flashmla_same_run) {
      FlashMlaProblem problem;
      problem.batch = batch;
      problem.seqlen_q = config.seqlen_q;
      problem.num_heads_q = config.num_heads_q;
      problem.num_pages = num_pages;
      problem.max_pages_per_seq = max_pages;
      problem.softmax_scale = params.softmax_scale;
      problem.causal = options.causal;
      problem.num_sms = num_sms;
      problem.q = q.data();
      problem.kv_cache = kv.data();
      problem.block_table = d_block_table.data();
      problem.seqlens = d_seqlens.data();
      flashmla = std::make_unique<FlashMlaSameRun>(problem, stream);
      works.push_back([&flashmla, stream] { flashmla->run(stream); });
    }
    const std::vector<double> medians = timer.median_us_interleaved(works, options.runs);
    if (flashmla && !variants.empty() && std::getenv("MLA_BENCH_FLASHMLA_DIAGNOSE") != nullptr)
      diagnose_flashmla_timing(
          [&](cudaStream_t s) { kernels::launch_mla_decode(variants.front(), s); },
          [&](cudaStream_t s) { flashmla->run(s); }, timer, options.runs, stream,
          fmt::format("{} b={} s_q={} h_q={} s_k={}", names.front(), config.batch, config.seqlen_q,
                      config.num_heads_q, config.seqlen_k_label()));
    std::optional<double> flashmla_diff;
    if (flashmla && !variants.empty()) {
      kernels::launch_mla_decode(variants.back(), stream);
      flashmla->run(stream);
      flashmla_diff = max_relative_difference(flashmla->out(), out.data(), out.size(), stream);
    }
    if (options.timeline_sink) {
      const int sm_clock_khz = cuda::current_device_info().sm_clock_khz;
      for (size_t k = 0; k < variants.size(); ++k) {
        if (!kernels::decode_timeline_applies(variants[k])) continue;
        const DecodeTimeline timeline =
            capture_decode_timeline(variants[k], std::min(options.runs, 10), sm_clock_khz, stream);
        options.timeline_sink(format_decode_timeline(
            timeline, fmt::format("{} b={} s_q={} h_q={} s_k={}", names[k], config.batch,
                                  config.seqlen_q, config.num_heads_q, config.seqlen_k_label())));
      }
    }
    if (options.pair_trace_sink) {
      const int sm_clock_khz = cuda::current_device_info().sm_clock_khz;
      for (size_t k = 0; k < variants.size(); ++k) {
        if (!kernels::decode_pair_trace_applies(variants[k])) continue;
        const DecodePairTrace trace = capture_decode_pair_trace(
            variants[k], std::min(options.runs, 10), stream, options.pair_trace_piece);
        options.pair_trace_sink(format_decode_pair_trace(
            trace,
            fmt::format("{} b={} s_q={} h_q={} s_k={}", names[k], config.batch, config.seqlen_q,
                        config.num_heads_q, config.seqlen_k_label()),
            sm_clock_khz));
      }
    }
    // What every kernel's row of this configuration shares: its bytes and FLOPs, FlashMLA's
    // reference time.
    auto set_config = [&](DecodeBenchRow& row) {
      row.config = config;
      row.mean_seqlen_k = mean_seqlen;
      row.bytes = batch * (rows_q * kernels::kHeadDimQK * 2 +
                           mean_seqlen * kernels::kHeadDimQK * 2 + rows_q * kernels::kHeadDimV * 2);
      row.flops = 2.0 * batch * rows_q * mean_seqlen * (kernels::kHeadDimQK + kernels::kHeadDimV);
      if (reference != nullptr) row.flashmla_us = reference->lookup(config);
    };
    for (size_t k = 0; k < variants.size(); ++k) {
      DecodeBenchRow row;
      row.kernel = names[k];
      row.us_plan = us_plan;
      row.us = medians[k];
      set_config(row);
      set_rates(row, ceilings);
      if (flashmla) row.flashmla_same_run_us = medians.back();
      row.workspace_bytes = workspace_bytes;
      rows.push_back(row);
      if (progress) progress(rows.size(), total, rows.back());
    }
    if (flashmla) {  // FlashMLA's own row, from the same formulas
      DecodeBenchRow row;
      row.kernel = "flashmla";
      set_config(row);
      row.us = medians.back();
      row.us_plan = 0;  // its scheduler metadata ran once, untimed
      set_rates(row, ceilings);
      row.out_rel_diff_vs_ours = flashmla_diff;
      rows.push_back(row);
      if (progress) progress(rows.size(), total, rows.back());
    }
  }
  return rows;
}

}  // namespace mla::bench
