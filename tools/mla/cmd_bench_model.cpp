// `mla bench throughput` and `mla bench step`: the whole model on the CUDA backend, usually with
// dummy weights of a released model's shapes (--model-preset deepseek-v2-lite --load-format
// dummy).
//
// throughput: offline serving through the real engine (N requests of I random prompt tokens, O
// output tokens each with ignore_eos, at most C in flight, greedy), reporting output and total
// tok/s, TTFT and ITL as a client sees them, and the decode steps against their roofline (the
// engine's step log: per step, the bytes that must move over the copy bandwidth measured in the
// same run). step: Model::forward alone on one decode-only batch of `batch` sequences with
// `context` cached tokens each (cache pages filled with random bf16), median of timed steps.
//
// The subtle thing: the roofline counts the weights a decode step touches (all but the routed
// experts, plus the experts its tokens are expected to hit) and the latent cache it reads; it does
// not count activations, so a step can never reach 100 %.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "model/roofline.h"
#include "tools/mla/commands.h"
#include "tools/mla/model_setup.h"
#if MLA_WITH_CUDA_BACKEND
#include <cuda_profiler_api.h>

#include "bench/ceilings.h"
#include "bench/timing.h"
#include "core/dtypes.h"
#include "cuda/check.h"
#include "engine/engine.h"
#include "engine/metrics.h"
#include "engine/model_runner.h"
#include "mla/kernels/fill.h"
#include "model/cuda_backend.h"
#include "model/synthetic_batch.h"
#endif

namespace mla::tools {
namespace {

// The process's resident set in MB (Linux /proc/self/statm), 0 where unreadable.
double resident_memory_mb() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  long pages_total = 0, pages_resident = 0;
  const int read = std::fscanf(file, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(file);
  return read == 2 ? pages_resident * (sysconf(_SC_PAGESIZE) / 1048576.0) : 0;
}

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct ThroughputOptions {
  ModelSourceOptions source;
  int input_len = 1000;
  int output_len = 1000;
  int num_prompts = 256;
  int max_concurrency = 0;  // 0: num_prompts
  int max_num_seqs = 0;     // 0: the concurrency
  int max_num_batched_tokens = 2048;
  uint64_t seed = 0;
  bool json = false;
  bool record_graphs = true;   // every decode bucket's step graph before the run
  double sample_seconds = 10;  // timeline interval (stability runs: tok/s and memory over time)
};

struct StepOptions {
  ModelSourceOptions source;
  int batch = 128;
  int context = 2048;
  int runs = 30;
  uint64_t seed = 0;
  bool json = false;
  bool profile = false;  // op by op, over a few eager steps after the measurement
};

#if MLA_WITH_CUDA_BACKEND
// Mean, median and 99th percentile (nearest rank) of `values`, in the values' unit.
struct Spread {
  double mean = 0, median = 0, p99 = 0;
  json to_json() const { return {{"mean", mean}, {"median", median}, {"p99", p99}}; }
};

Spread spread(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / values.size();
  const size_t n = values.size();
  s.median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * n));
  s.p99 = values[std::min(n, std::max<size_t>(rank, 1)) - 1];
  return s;
}

double median_of(std::vector<double> values) {
  return spread(std::move(values)).median;
}

// Human lines go to stdout, or to stderr when stdout carries the JSON.
template <typename... Args>
void say(bool json_mode, fmt::format_string<Args...> format, Args&&... args) {
  const std::string line = fmt::format(format, std::forward<Args>(args)...);
  std::fprintf(json_mode ? stderr : stdout, "%s\n", line.c_str());
  std::fflush(json_mode ? stderr : stdout);
}

json bytes_json(const model::DecodeStepBytes& bytes) {
  return {{"weights", bytes.weights},
          {"kv", bytes.kv},
          {"total", bytes.total()},
          {"experts_per_layer", bytes.experts_per_layer}};
}

json ceilings_json(const bench::Ceilings& ceilings) {
  return {{"copy_GBps_read_plus_write", ceilings.copy_gbps},
          {"gemm_bf16_TFLOPs", ceilings.gemm_tflops}};
}

bench::Ceilings measure(model::CudaBackend& cuda, bool json_mode) {
  say(json_mode, "Measuring ceilings (device-to-device copy, cuBLAS bf16 GEMM)...");
  const bench::Ceilings ceilings = bench::measure_ceilings(cuda.stream(), 10);
  say(json_mode, "Ceilings (this run): copy {:.0f} GB/s (read + write), bf16 GEMM {:.0f} TFLOP/s",
      ceilings.copy_gbps, ceilings.gemm_tflops);
  return ceilings;
}

// `mla bench step --profile`: kProfileSteps eager steps with the backend's op profiler on, the
// median per op over them, against the eager step's time on the stream (with and without the
// profiler's events) and the graph step's. Event pairs time an op from when the stream reaches its
// first event, so when the host cannot keep the GPU busy an op's time includes its own launch
// latency; the gaps between ops (eager step − sum of ops) are the rest of the launch overhead.
constexpr int kProfileSteps = 5;

struct OpProfileLine {
  std::string name;
  bool phase = false;
  double calls = 0, us = 0;  // per step, medians over the profiled steps
};

struct StepProfile {
  std::vector<OpProfileLine> lines;  // ops by time per step, each followed by its phases
  double sum_ops_us = 0;             // over ops, not phases
  double eager_us = 0;               // median eager step on the stream, profiler off
  double eager_profiled_us = 0;      // the same with the profiler's events
};

StepProfile profile_step(model::CudaBackend& cuda, model::Model& model,
                         const std::function<void()>& forward) {
  cudaEvent_t begin = nullptr, end = nullptr;
  MLA_CUDA_CHECK(cudaEventCreate(&begin));
  MLA_CUDA_CHECK(cudaEventCreate(&end));
  auto timed_us = [&](bool profiled) {
    if (profiled) cuda.reset_op_profile();
    MLA_CUDA_CHECK(cudaEventRecord(begin, cuda.stream()));
    forward();
    MLA_CUDA_CHECK(cudaEventRecord(end, cuda.stream()));
    MLA_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    MLA_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    return 1e3 * ms;
  };
  model.set_step_graphs(false);
  forward();  // warm-up of the eager path
  std::vector<double> eager, profiled;
  for (int i = 0; i < kProfileSteps; ++i) eager.push_back(timed_us(false));
  // One more eager step between cudaProfilerStart and Stop (no-ops without a profiler), so that
  // `ncu --profile-from-start off` times exactly one step's kernels
  // (scripts/gpu/step-kernels.sh).
  MLA_CUDA_CHECK(cudaProfilerStart());
  forward();
  MLA_CUDA_CHECK(cudaStreamSynchronize(cuda.stream()));
  MLA_CUDA_CHECK(cudaProfilerStop());
  std::map<std::string, std::vector<double>> calls, us;
  std::map<std::string, bool> is_phase;
  cuda.set_op_profiling(true);
  for (int i = 0; i < kProfileSteps; ++i) {
    profiled.push_back(timed_us(true));
    for (const model::OpProfileEntry& entry : cuda.op_profile()) {
      calls[entry.name].push_back(static_cast<double>(entry.calls));
      us[entry.name].push_back(entry.total_us);
      is_phase[entry.name] = entry.phase;
    }
  }
  cuda.set_op_profiling(false);
  cuda.reset_op_profile();
  model.set_step_graphs(true);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);

  StepProfile p;
  p.eager_us = median_of(eager);
  p.eager_profiled_us = median_of(profiled);
  std::vector<OpProfileLine> ops, phases;
  for (const auto& [name, values] : us) {
    const OpProfileLine line{name, is_phase[name], median_of(calls[name]), median_of(values)};
    (line.phase ? phases : ops).push_back(line);
    if (!line.phase) p.sum_ops_us += line.us;
  }
  auto by_time = [](const OpProfileLine& a, const OpProfileLine& b) { return a.us > b.us; };
  std::sort(ops.begin(), ops.end(), by_time);
  std::sort(phases.begin(), phases.end(), by_time);
  for (const OpProfileLine& op : ops) {
    p.lines.push_back(op);
    for (const OpProfileLine& phase : phases)
      if (phase.name.starts_with(op.name + "/")) p.lines.push_back(phase);
  }
  return p;
}

// `out` with the profile: the "op_profile" array (ops and phases as in the table) and the
// "op_profile_step" summary (graph_step_us: null when the measured step was eager).
json with_op_profile(json out, const StepProfile& p, const json& graph_step_us) {
  json ops = json::array();
  for (const OpProfileLine& line : p.lines)
    ops.push_back({{"name", line.name},
                   {"phase", line.phase},
                   {"calls_per_step", line.calls},
                   {"us_per_step", line.us},
                   {"pct_of_eager_step", 100 * line.us / p.eager_profiled_us},
                   {"us_per_call", line.calls > 0 ? line.us / line.calls : 0.0}});
  out["op_profile"] = ops;
  out["op_profile_step"] = {{"steps", kProfileSteps},
                            {"sum_of_ops_us", p.sum_ops_us},
                            {"eager_step_us", p.eager_us},
                            {"eager_step_profiled_us", p.eager_profiled_us},
                            {"graph_step_us", graph_step_us}};
  return out;
}

void print_bar(const char* what, int done, int total, const std::string& tail) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\r%s [%s%s] %d/%d %s", what, std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done, total, tail.c_str());
  std::fflush(stderr);
}
#endif

void run_bench_throughput(ThroughputOptions o) {
  o.source.backend = "cuda";
  const ModelSource source = resolve_model_source(o.source);
  const int max_model_len = o.input_len + o.output_len;
  if (max_model_len > source.config.max_position_embeddings)
    throw_error(
        "--input-len + --output-len = {} is more than the model's max_position_embeddings {}",
        max_model_len, source.config.max_position_embeddings);
#if MLA_WITH_CUDA_BACKEND
  if (o.max_concurrency == 0) o.max_concurrency = o.num_prompts;
  const int concurrency = std::min(o.max_concurrency, o.num_prompts);
  const int max_num_seqs = o.max_num_seqs > 0 ? o.max_num_seqs : concurrency;
  const bool js = o.json;
  LoadedModel loaded = load_model(source, o.source, {}, "mla bench");
  model::CudaBackend& cuda = *loaded.cuda;
  const weights::ModelConfig& config = loaded.model->config();
  say(js, "GPU: {}", cuda::describe(cuda.device()));
  const bench::Ceilings ceilings = measure(cuda, js);
  MemoryPlanRequest request;
  request.max_num_batched_tokens = o.max_num_batched_tokens;
  request.max_num_seqs = max_num_seqs;
  request.max_model_len = max_model_len;
  const PlannedMemory memory = plan_memory(loaded, o.source, request, "mla bench");
  const int num_pages = memory.num_pages;

  engine::ModelCacheRunner runner(*loaded.model, num_pages);
  if (o.record_graphs) record_step_graphs(runner, *loaded.model, max_num_seqs, "mla bench");
  engine::EngineOptions engine_options;
  engine_options.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  engine_options.scheduler.max_num_seqs = max_num_seqs;
  engine_options.scheduler.max_model_len = max_model_len;
  engine_options.max_queued_requests = o.num_prompts + 1;
  engine::Engine engine(runner, engine_options, nullptr);

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
  std::vector<std::vector<int32_t>> prompts(o.num_prompts);
  for (auto& prompt : prompts) {
    prompt.resize(o.input_len);
    for (int32_t& id : prompt) id = token(rng);
  }
  engine::RequestOptions request_options;
  request_options.max_tokens = o.output_len;
  request_options.ignore_eos = true;
  request_options.sampling.temperature = 0.0f;

  struct Result {
    double ttft = 0;
    int output_tokens = 0;
    double latency = 0;
    Clock::time_point end;
    std::string error;
  };
  std::vector<Result> results(o.num_prompts);
  // Inter-token gaps go into fixed-size bins, not per-request vectors: the process's memory then
  // stays flat through a long run (a stability run watches it).
  engine::LatencySpread itl_spread;
  std::atomic<int> next{0}, finished{0};
  std::atomic<int64_t> output_tokens{0};
  say(js,
      "Running {} requests ({} in, {} out, at most {} in flight, max_num_seqs {}, "
      "max_num_batched_tokens {})...",
      o.num_prompts, o.input_len, o.output_len, concurrency, max_num_seqs,
      o.max_num_batched_tokens);
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c)
    clients.emplace_back([&] {
      for (int i = next++; i < o.num_prompts; i = next++) {
        Result& result = results[i];
        const Clock::time_point submitted = Clock::now();
        Clock::time_point last = submitted;
        try {
          auto stream = engine.submit({prompts[i], request_options});
          std::vector<engine::ChoiceUpdate> updates;
          while (!stream->done()) {
            updates.clear();
            stream->wait(updates, std::chrono::milliseconds(200));
            // Latencies from the engine's emission times, not from when this client woke up
            // (a client that wakes late collects several tokens at once).
            for (const engine::ChoiceUpdate& update : updates) {
              for (const engine::GeneratedToken& token : update.tokens) {
                const double gap = std::chrono::duration<double>(token.emitted - last).count();
                if (result.output_tokens == 0)
                  result.ttft = gap;
                else
                  itl_spread.add(gap);
                last = token.emitted;
                ++result.output_tokens;
              }
              output_tokens += static_cast<int64_t>(update.tokens.size());  // as they arrive
              if (update.finish && *update.finish == engine::FinishReason::kError)
                result.error = update.error;
            }
          }
        } catch (const std::exception& error) {
          result.error = error.what();
        }
        result.end = Clock::now();
        result.latency = std::chrono::duration<double>(result.end - submitted).count();
        ++finished;
      }
    });
  // The timeline: every sample_seconds, output tokens so far, free device memory and the
  // process's resident memory, so a long run shows whether throughput holds and memory stays put.
  struct Sample {
    double seconds = 0;
    int64_t output_tokens = 0;
    int finished = 0;
    double device_free_gb = 0;
    double host_rss_mb = 0;
  };
  std::vector<Sample> timeline;
  auto take_sample = [&](double seconds) {
    size_t free_bytes = 0, total_bytes = 0;
    MLA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    timeline.push_back(
        {seconds, output_tokens.load(), finished.load(), free_bytes / 1e9, resident_memory_mb()});
  };
  take_sample(0);
  while (finished < o.num_prompts) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (seconds >= timeline.back().seconds + o.sample_seconds) take_sample(seconds);
    print_bar("mla bench: requests", finished, o.num_prompts,
              fmt::format("{:.0f} s, {:.0f} output tok/s", seconds, output_tokens / seconds));
  }
  take_sample(std::chrono::duration<double>(Clock::now() - start).count());
  for (std::thread& client : clients) client.join();
  Clock::time_point last_end = start;
  for (const Result& r : results) last_end = std::max(last_end, r.end);
  const double wall = std::chrono::duration<double>(last_end - start).count();
  std::fprintf(stderr, "\n");

  int errors = 0;
  std::string first_error;
  std::vector<double> ttft_ms, latency_s;
  for (const Result& r : results) {
    if (!r.error.empty() && errors++ == 0) first_error = r.error;
    if (r.output_tokens > 0) ttft_ms.push_back(r.ttft * 1e3);
    latency_s.push_back(r.latency);
  }
  const int64_t out_tokens = output_tokens;
  const int64_t in_tokens = int64_t(o.num_prompts) * o.input_len;
  const Spread ttft = spread(ttft_ms);
  const engine::LatencySpread::Summary gaps = itl_spread.summary();
  const Spread itl{gaps.mean * 1e3, gaps.median * 1e3, gaps.p99 * 1e3};

  // Steps from the engine's log: decode-only ones against their roofline.
  const double bandwidth = ceilings.copy_gbps * 1e9;  // bytes/s
  std::vector<double> decode_ms, decode_batch, roofline_ms, roofline_fraction, mixed_ms,
      mixed_tokens;
  for (const engine::StepRecord& step : engine.metrics().step_log.snapshot()) {
    if (step.decode_only()) {
      const double bytes =
          model::decode_step_bytes(config, step.num_decode_tokens, step.decode_context_tokens)
              .total();
      decode_ms.push_back(step.seconds * 1e3);
      decode_batch.push_back(step.num_decode_tokens);
      roofline_ms.push_back(bytes / bandwidth * 1e3);
      roofline_fraction.push_back(bytes / bandwidth / step.seconds);
    } else {
      mixed_ms.push_back(step.seconds * 1e3);
      mixed_tokens.push_back(step.num_tokens);
    }
  }
  const double pct_roofline = 100.0 * median_of(roofline_fraction);

  say(js,
      "{} requests in {:.2f} s{}: output {:.1f} tok/s, total {:.1f} tok/s ({} output, {} "
      "prompt tokens)",
      o.num_prompts, wall, errors > 0 ? fmt::format(" ({} FAILED: {})", errors, first_error) : "",
      out_tokens / wall, (in_tokens + out_tokens) / wall, out_tokens, in_tokens);
  say(js,
      "TTFT ms: mean {:.1f}, median {:.1f}, p99 {:.1f}; ITL ms: mean {:.2f}, median {:.2f}, "
      "p99 {:.2f}",
      ttft.mean, ttft.median, ttft.p99, itl.mean, itl.median, itl.p99);
  say(js,
      "decode steps: {} (median batch {:.0f}, median {:.2f} ms); roofline (weights touched + "
      "KV read over {:.0f} GB/s) median {:.2f} ms: {:.0f}% of roofline",
      decode_ms.size(), median_of(decode_batch), median_of(decode_ms), ceilings.copy_gbps,
      median_of(roofline_ms), pct_roofline);
  say(js,
      "mixed/prefill steps: {} (median {:.0f} tokens, median {:.2f} ms); graphs captured {}, "
      "replays {}; preemptions {}",
      mixed_ms.size(), median_of(mixed_tokens), median_of(mixed_ms), cuda.stats().graphs_captured,
      cuda.stats().graph_replays, engine.snapshot().preemptions);
  // Throughput per interval and the memory drift over the run (the stability check).
  json timeline_json = json::array();
  json timeline_summary = nullptr;
  std::vector<double> interval_tok_s;
  for (size_t i = 0; i < timeline.size(); ++i) {
    const Sample& t = timeline[i];
    double tok_s = 0;
    if (i > 0 && t.seconds > timeline[i - 1].seconds)
      tok_s =
          (t.output_tokens - timeline[i - 1].output_tokens) / (t.seconds - timeline[i - 1].seconds);
    if (i > 0) interval_tok_s.push_back(tok_s);
    timeline_json.push_back({{"s", t.seconds},
                             {"finished", t.finished},
                             {"output_tokens", t.output_tokens},
                             {"interval_output_tok_per_s", tok_s},
                             {"device_free_GB", t.device_free_gb},
                             {"host_rss_MB", t.host_rss_mb}});
  }
  if (timeline.size() >= 2) {
    double device_min = timeline[0].device_free_gb, device_max = device_min;
    for (const Sample& t : timeline) {
      device_min = std::min(device_min, t.device_free_gb);
      device_max = std::max(device_max, t.device_free_gb);
    }
    // Steady state: without the first interval (the first prompts' prefill) and the last (the
    // drain, fewer requests left than slots) when there are enough.
    std::vector<double> steady = interval_tok_s;
    if (steady.size() >= 4) steady = std::vector<double>(steady.begin() + 1, steady.end() - 1);
    const double steady_median = median_of(steady);
    const auto [steady_min, steady_max] = std::minmax_element(steady.begin(), steady.end());
    say(js,
        "timeline ({} samples every {:.0f} s): steady interval output tok/s median {:.0f} (min "
        "{:.0f}, max {:.0f}, {} intervals, first and last left out); free device memory "
        "{:.2f}..{:.2f} GB; host RSS {:.0f} -> {:.0f} MB",
        timeline.size(), o.sample_seconds, steady_median, *steady_min, *steady_max, steady.size(),
        device_min, device_max, timeline.front().host_rss_mb, timeline.back().host_rss_mb);
    timeline_summary = {{"steady_intervals", steady.size()},
                        {"steady_output_tok_per_s_median", steady_median},
                        {"steady_output_tok_per_s_min", *steady_min},
                        {"steady_output_tok_per_s_max", *steady_max},
                        {"device_free_GB_min", device_min},
                        {"device_free_GB_max", device_max},
                        {"host_rss_MB_first", timeline.front().host_rss_mb},
                        {"host_rss_MB_last", timeline.back().host_rss_mb}};
  }
  if (js) {
    const json out = {
        {"bench", "throughput"},
        {"model", source.name},
        {"load_format", o.source.load_format},
        {"gpu", cuda::describe(cuda.device())},
        {"config",
         {{"input_len", o.input_len},
          {"output_len", o.output_len},
          {"num_prompts", o.num_prompts},
          {"max_concurrency", concurrency},
          {"max_num_seqs", max_num_seqs},
          {"max_num_batched_tokens", o.max_num_batched_tokens},
          {"step_graphs", !o.source.eager},
          {"fold_shared_experts", !o.source.unfold_shared_experts},
          {"fuse_input_projections", !o.source.unfuse_input_projections},
          {"graphs_recorded_before_run", o.record_graphs && !o.source.eager},
          {"kv_cache_pages", num_pages},
          {"seed", o.seed}}},
        {"ceilings_same_run", ceilings_json(ceilings)},
        {"memory_GB",
         {{"total", memory.total_bytes / 1e9},
          {"weights", memory.weight_bytes / 1e9},
          {"activations_arena", memory.arena_bytes / 1e9},
          {"kv_cache", memory.kv_cache_bytes / 1e9},
          {"reserve", memory.reserve_bytes / 1e9}}},
        {"results",
         {{"wall_s", wall},
          {"errors", errors},
          {"output_tokens", out_tokens},
          {"prompt_tokens", in_tokens},
          {"output_tok_per_s", out_tokens / wall},
          {"total_tok_per_s", (in_tokens + out_tokens) / wall},
          {"ttft_ms", ttft.to_json()},
          {"itl_ms", itl.to_json()},
          {"request_latency_s", spread(latency_s).to_json()}}},
        {"decode_steps",
         {{"count", decode_ms.size()},
          {"median_batch", median_of(decode_batch)},
          {"ms", spread(decode_ms).to_json()},
          {"roofline_ms_median", median_of(roofline_ms)},
          {"pct_of_roofline_median", pct_roofline}}},
        {"mixed_steps",
         {{"count", mixed_ms.size()},
          {"median_tokens", median_of(mixed_tokens)},
          {"ms", spread(mixed_ms).to_json()}}},
        {"graphs",
         {{"captured", cuda.stats().graphs_captured}, {"replays", cuda.stats().graph_replays}}},
        {"timeline_summary", timeline_summary},
        {"timeline", timeline_json}};
    std::printf("%s\n", out.dump(1).c_str());
  }
  if (errors > 0) throw_error("{} of {} requests failed: {}", errors, o.num_prompts, first_error);
#endif
}

void run_bench_step(StepOptions o) {
  o.source.backend = "cuda";
  const ModelSource source = resolve_model_source(o.source);
  if (int64_t(o.context) + 1 > source.config.max_position_embeddings)
    throw_error("--context {} leaves no room for the decoded token (max_position_embeddings {})",
                o.context, source.config.max_position_embeddings);
#if MLA_WITH_CUDA_BACKEND
  const bool js = o.json;
  model::ModelOptions model_options;
  model_options.max_graph_batch = std::max(model_options.max_graph_batch, o.batch);
  model_options.graph_max_context = std::max(model_options.graph_max_context, o.context + 1);
  LoadedModel loaded = load_model(source, o.source, model_options, "mla bench");
  model::CudaBackend& cuda = *loaded.cuda;
  model::Model& model = *loaded.model;
  const weights::ModelConfig& config = model.config();
  say(js, "GPU: {}", cuda::describe(cuda.device()));
  const bench::Ceilings ceilings = measure(cuda, js);

  const model::SyntheticBatch step =
      model::make_synthetic_batch({o.batch, o.context, 0, 0, 0}, config.vocab_size, 64, o.seed + 1);
  model::LatentCache cache = model.allocate_cache(step.num_pages, 64);
  for (size_t layer = 0; layer < cache.layers.size(); ++layer) {
    kernels::RandomFillSpec spec;
    spec.seed = o.seed * 1000 + layer + 7;
    spec.stddev = 1.0f;
    spec.clip = 4.0f;
    kernels::launch_fill_random_bf16(static_cast<bf16*>(cache.layers[layer].data),
                                     static_cast<size_t>(cache.layers[layer].numel()), spec,
                                     cuda.stream());
  }
  // An arena with room to spare: this step's activations, not a memory plan.
  size_t free_bytes = 0, total_bytes = 0;
  MLA_CUDA_CHECK(cudaStreamSynchronize(cuda.stream()));
  MLA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  constexpr size_t kGiB = size_t(1) << 30;
  if (free_bytes < 3 * kGiB)
    throw_error("only {:.1f} GB free after the weights and the cache: lower --batch or --context",
                free_bytes / 1e9);
  cuda.resize_arena(std::min(free_bytes - 2 * kGiB, 16 * kGiB));
  const bool graph = model.graph_bucket(o.batch) > 0;

  // What the engine does each decode step: the forward, then greedy sampling on the device and
  // the chosen ids to the host (the logits never leave the GPU).
  model::Tensor logits;
  std::vector<model::RowSampling> rows(o.batch);
  for (int i = 0; i < o.batch; ++i) {
    rows[i].logit_row = i;
    rows[i].params.temperature = 0.0f;
  }
  auto forward = [&] { logits = model.forward(step.batch, cache); };
  int64_t out_of_vocab = 0;
  auto forward_and_sample = [&] {
    forward();
    for (const model::RowSample& sample : cuda.sample(logits, rows))
      out_of_vocab += sample.token < 0 || sample.token >= config.vocab_size;
  };
  for (int i = 0; i < 3; ++i) forward_and_sample();
  std::vector<float> host(size_t(o.batch) * config.vocab_size);
  cuda.copy_to_host(logits, host.data());
  const int64_t non_finite =
      std::count_if(host.begin(), host.end(), [](float v) { return !std::isfinite(v); });
  std::vector<double> sampled_us;
  for (int i = 0; i < o.runs; ++i) {
    const Clock::time_point begin = Clock::now();
    forward_and_sample();
    sampled_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
  }
  bench::EventTimer timer(cuda.stream());
  const double device_us = timer.median_us(forward, o.runs, 2, /*flush_l2=*/false);
  MLA_CUDA_CHECK(cudaStreamSynchronize(cuda.stream()));
  const double us = median_of(sampled_us);
  if (out_of_vocab > 0)
    throw_error("the device sampler returned {} ids outside the vocab", out_of_vocab);

  const cuda::TunedGemmStats gemm = cuda.gemm_stats();
  say(js,
      "linear: cuBLASLt algorithms timed for {} GEMM shapes ({} not the heuristic's first), {:.0f} "
      "ms",
      gemm.problems_tuned, gemm.tuned_not_first, gemm.tuning_ms);
  const model::DecodeStepBytes bytes =
      model::decode_step_bytes(config, o.batch, step.decode_context_tokens);
  const double roofline_us = bytes.total() / (ceilings.copy_gbps * 1e3);
  say(js,
      "step: {} dummy, batch {}, context {}, {}: {:.0f} us per step on the GPU (events); {:.0f} "
      "us with greedy sampling on the device and the ids on the host (wall)",
      source.name, o.batch, o.context, graph ? "step graph" : "eager", device_us, us);
  say(js,
      "bytes per step {:.2f} GB (weights {:.2f} GB with {:.1f} experts per MoE layer, KV read "
      "{:.2f} GB); copy bandwidth {:.0f} GB/s; roofline {:.0f} us",
      bytes.total() / 1e9, bytes.weights / 1e9, bytes.experts_per_layer, bytes.kv / 1e9,
      ceilings.copy_gbps, roofline_us);
  say(js, "{:.2f}x roofline on the GPU ({:.0f}%), {:.2f}x with sampling ({:.0f}%); goal 1.3x{}",
      device_us / roofline_us, 100 * roofline_us / device_us, us / roofline_us,
      100 * roofline_us / us,
      non_finite > 0 ? fmt::format("; WARNING: {} logits are not finite", non_finite) : "");
  StepProfile profile;
  if (o.profile) {
    say(js, "Profiling {} eager steps op by op...", kProfileSteps);
    profile = profile_step(cuda, model, forward);
    const double step_us = profile.eager_profiled_us;
    say(js, "{:<28} {:>10} {:>12} {:>8} {:>11}", "op (median of steps)", "calls/step", "us/step",
        "% step", "us/call");
    for (const OpProfileLine& line : profile.lines)
      say(js, "{:<28} {:>10.0f} {:>9.1f} us {:>7.1f}% {:>8.2f} us",
          line.phase ? "  " + line.name : line.name, line.calls, line.us, 100 * line.us / step_us,
          line.calls > 0 ? line.us / line.calls : 0.0);
    say(js,
        "sum of ops {:.0f} us; eager step {:.0f} us on the stream ({:.0f} us with the profiler's "
        "events): {:.0f} us between ops; {} step {:.0f} us ({:.0f} us less than eager)",
        profile.sum_ops_us, profile.eager_us, step_us, step_us - profile.sum_ops_us,
        graph ? "graph" : "measured (eager)", device_us, profile.eager_us - device_us);
  }
  if (js) {
    const json out = {{"bench", "step"},
                      {"model", source.name},
                      {"load_format", o.source.load_format},
                      {"gpu", cuda::describe(cuda.device())},
                      {"batch", o.batch},
                      {"context", o.context},
                      {"mode", graph ? "step graph" : "eager"},
                      {"fold_shared_experts", !o.source.unfold_shared_experts},
                      {"fuse_input_projections", !o.source.unfuse_input_projections},
                      {"runs", o.runs},
                      {"us_per_step_with_device_sampling", us},
                      {"us_per_step_device", device_us},
                      {"bytes_per_step", bytes_json(bytes)},
                      {"weight_bytes_loaded", cuda.stats().weight_bytes},
                      {"ceilings_same_run", ceilings_json(ceilings)},
                      {"roofline_us", roofline_us},
                      {"x_roofline_with_device_sampling", us / roofline_us},
                      {"x_roofline_device", device_us / roofline_us},
                      {"goal_x_roofline", 1.3},
                      {"non_finite_logits", non_finite},
                      {"graph_replays", cuda.stats().graph_replays}};
    const json printed =
        o.profile ? with_op_profile(out, profile, graph ? json(device_us) : json()) : out;
    std::printf("%s\n", printed.dump(1).c_str());
  }
#endif
}

}  // namespace

void add_bench_model_commands(CLI::App* bench) {
  auto throughput = std::make_shared<ThroughputOptions>();
  CLI::App* t = bench->add_subcommand(
      "throughput", "Offline throughput of the whole model through the engine (CUDA backend)");
  add_model_source_options(t, throughput->source, /*with_model_dir=*/true, /*with_backend=*/false);
  t->add_option("--input-len", throughput->input_len, "Random prompt tokens per request")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  t->add_option("--output-len", throughput->output_len, "Output tokens per request (ignore_eos)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  t->add_option("--num-prompts", throughput->num_prompts, "Requests")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  t->add_option("--max-concurrency", throughput->max_concurrency,
                "Requests in flight at most (0: all of them)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  t->add_option("--max-num-seqs", throughput->max_num_seqs,
                "The engine's running sequences (0: the concurrency)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  t->add_option("--max-num-batched-tokens", throughput->max_num_batched_tokens,
                "The engine's token budget per step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  t->add_option("--seed", throughput->seed, "Seed of the random prompts")->capture_default_str();
  t->add_flag("--json", throughput->json, "Print one JSON object on stdout (text to stderr)");
  t->add_option("--sample-seconds", throughput->sample_seconds,
                "Interval of the timeline (output tok/s, free device memory, host RSS)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_flag("!--no-graph-warmup", throughput->record_graphs,
              "Record the step graphs during the run instead of before it");
  t->callback([throughput] { run_bench_throughput(*throughput); });

  auto step = std::make_shared<StepOptions>();
  CLI::App* s = bench->add_subcommand(
      "step", "One decode-only forward step vs the HBM roofline (CUDA backend)");
  add_model_source_options(s, step->source, /*with_model_dir=*/true, /*with_backend=*/false);
  s->add_option("--batch", step->batch, "Decoding sequences")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  s->add_option("--context", step->context, "Cached tokens of every sequence")
      ->check(CLI::Range(0, 1 << 22))
      ->capture_default_str();
  s->add_option("--runs", step->runs, "Timed steps (median reported)")
      ->check(CLI::Range(20, 10000))
      ->capture_default_str();
  s->add_option("--seed", step->seed, "Seed of the batch and the cache contents")
      ->capture_default_str();
  s->add_flag("--json", step->json, "Print one JSON object on stdout (text to stderr)");
  s->add_flag("--profile", step->profile,
              "Then time every backend op over a few eager steps (table; \"op_profile\" in JSON)");
  s->callback([step] { run_bench_step(*step); });
}

}  // namespace mla::tools
