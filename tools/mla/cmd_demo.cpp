// `mla demo`: decode attention for a small ragged batch on the CPU reference and, when a GPU is
// there, on the GPU kernel, with the error between the two.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>

#include "ref/mla_decode_ref.h"
#include "ref/paged_problem.h"
#include "tools/mla/commands.h"
#if MLA_WITH_CUDA
#include "bench/gpu_decode_problem.h"
#include "bench/timing.h"
#include "cuda/device.h"
#endif

namespace mla::tools {
namespace {

struct DemoOptions {
  int batch = 6;
  int heads = 16;
  int seqlen_q = 1;
  int max_seqlen = 2000;
  bool cpu_only = false;
};

void run_demo(const DemoOptions& options) {
  ref::PagedDecodeProblemSpec spec;
  spec.seqlen_q = options.seqlen_q;
  spec.num_heads_q = options.heads;
  spec.seed = 2026;
  // Sequence 0 is empty; the others spread up to max_seqlen, none a multiple of the page size.
  for (int b = 0; b < options.batch; ++b)
    spec.seqlens.push_back(
        b == 0 ? 0 : std::max(1, options.max_seqlen * b / std::max(1, options.batch - 1) - 3 * b));
  const ref::PagedDecodeProblem problem = ref::make_paged_decode_problem(spec);

  fmt::print("mla.cpp decode demo: MLA attention over a paged latent cache\n");
  fmt::print(
      "  batch {} (seqlens {}), s_q {}, h_q {}, d_qk 576, d_v 512, 64-token pages in random order, "
      "causal\n",
      problem.batch, fmt::join(problem.seqlens, ", "), spec.seqlen_q, spec.num_heads_q);

  const size_t out_count = size_t(problem.batch) * spec.seqlen_q * spec.num_heads_q * 512;
  std::vector<float> out(out_count), lse(size_t(problem.batch) * spec.num_heads_q * spec.seqlen_q);
  const auto start = std::chrono::steady_clock::now();
  ref::mla_decode(ref::ref_inputs(problem), out.data(), lse.data());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  double sum_sq = 0;
  for (float v : out) sum_sq += double(v) * v;
  fmt::print(
      "CPU reference (src/ref, fp32/double): {:.1f} ms; ‖out‖ = {:.4f}; lse[seq 1, head 0] = "
      "{:.5f}; "
      "seq 0 (empty): lse = {}\n",
      ms, std::sqrt(sum_sq), lse[size_t(1) * spec.num_heads_q * spec.seqlen_q], lse[0]);

#if MLA_WITH_CUDA
  if (options.cpu_only) return;
  if (cuda::device_count() == 0) {
    fmt::print(
        "GPU: none found, so only the CPU reference ran. On an H100/H200 this demo also runs\n"
        "     the CUDA kernel and compares it with the reference; `mla bench decode` measures "
        "it.\n");
    return;
  }
  const cuda::DeviceInfo device = cuda::current_device_info();
  fmt::print("GPU: {}\n", cuda::describe(device));
  if (device.compute_major != 9) {
    fmt::print("     the decode kernel needs sm_90 (H100/H200); skipping the GPU run.\n");
    return;
  }
  bench::GpuDecodeProblem gpu(problem, device.num_sms);
  const bench::DecodeOutputs result = gpu.run(nullptr, kernels::MlaDecodeKernel::kBaseline);
  double err_sq = 0, max_lse_err = 0;
  for (size_t i = 0; i < out.size(); ++i)
    err_sq += double(result.out[i] - out[i]) * (result.out[i] - out[i]);
  for (size_t i = 0; i < lse.size(); ++i)
    if (std::isfinite(lse[i]))
      max_lse_err =
          std::max(max_lse_err, double(std::fabs(result.lse[i] - lse[i]) / std::fabs(lse[i])));
  bench::EventTimer timer(nullptr);
  const kernels::MlaDecodeParams params = gpu.decode_params();
  const double us = timer.median_us([&] { kernels::launch_mla_decode(params, nullptr); }, 20);
  fmt::print(
      "GPU kernel (baseline): {:.1f} µs; ‖out − ref‖/‖ref‖ = {:.2e} (bf16 output); max lse "
      "relative error {:.2e}\n",
      us, std::sqrt(err_sq / sum_sq), max_lse_err);
#else
  fmt::print("GPU: this build has no CUDA (configure with nvcc on PATH for the GPU kernels).\n");
#endif
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* command = app.add_subcommand(
      "demo", "Decode a small ragged batch on the CPU reference and (if present) the GPU");
  command->add_option("--batch", options->batch, "Sequences")->check(CLI::Range(1, 256));
  command->add_option("--heads", options->heads, "Query heads h_q")->check(CLI::Range(1, 128));
  command->add_option("--seqlen-q", options->seqlen_q, "Query tokens per sequence s_q")
      ->check(CLI::Range(1, 4));
  command->add_option("--max-seqlen", options->max_seqlen, "Longest sequence")
      ->check(CLI::Range(64, 1 << 17));
  command->add_flag("--cpu-only", options->cpu_only, "Run the CPU reference only");
  command->callback([options] { run_demo(*options); });
}

}  // namespace mla::tools
