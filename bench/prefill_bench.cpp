// `mla bench prefill`; see prefill_bench.h. v is a view inside a [tokens, heads, 256] kv tensor,
// as the model lays it out, so the timings include that strided read.
#include "bench/prefill_bench.h"

#include <fmt/format.h>

#include <vector>

#include "bench/timing.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "mla/kernels/fill.h"
#include "mla/kernels/prefill_attention.h"

namespace mla::bench {

namespace {
constexpr int kTokens = 16384;
constexpr float kSoftmaxScale = 0.135234f;  // DeepSeek-V3
}  // namespace

std::vector<PrefillBenchCase> prefill_bench_sweep() {
  std::vector<PrefillBenchCase> cases;
  for (int heads : {16, 128})
    for (int seqlen : {1024, 4096, 8192}) cases.push_back({heads, seqlen, kTokens / seqlen});
  return cases;
}

namespace {

PrefillBenchRow run_case(const PrefillBenchCase& c, int runs, EventTimer& timer,
                         cudaStream_t stream) {
  using kernels::kPrefillHeadDimQK;
  using kernels::kPrefillHeadDimV;
  const int64_t tokens = int64_t(c.batch) * c.seqlen;
  const int64_t heads = c.num_heads;
  cuda::DeviceBuffer<bf16> q(size_t(tokens * heads * kPrefillHeadDimQK));
  cuda::DeviceBuffer<bf16> k(size_t(tokens * heads * kPrefillHeadDimQK));
  cuda::DeviceBuffer<bf16> kv(size_t(tokens * heads * 2 * kPrefillHeadDimV));
  cuda::DeviceBuffer<bf16> out(size_t(tokens * heads * kPrefillHeadDimV));
  cuda::DeviceBuffer<float> lse(size_t(tokens * heads));
  kernels::launch_fill_random_bf16(q.data(), q.size(), {1, 1.f, 4.f}, stream);
  kernels::launch_fill_random_bf16(k.data(), k.size(), {2, 1.f, 4.f}, stream);
  kernels::launch_fill_random_bf16(kv.data(), kv.size(), {3, 1.f, 4.f}, stream);

  std::vector<kernels::AttentionSpanDevice> spans;
  for (int b = 0; b < c.batch; ++b)
    spans.push_back({b * c.seqlen, c.seqlen, b * c.seqlen, c.seqlen, 1});
  cuda::DeviceBuffer<kernels::AttentionSpanDevice> d_spans(spans.size());
  d_spans.copy_from_host(spans, stream);

  kernels::PrefillAttentionParams p;
  p.num_q_rows = tokens;
  p.num_k_rows = tokens;
  p.num_heads = c.num_heads;
  p.softmax_scale = kSoftmaxScale;
  p.q = q.data();
  p.k = k.data();
  p.v = kv.data() + kPrefillHeadDimV;
  p.out = out.data();
  p.lse = lse.data();
  p.set_contiguous_strides();
  p.v_row_stride = heads * 2 * kPrefillHeadDimV;
  p.v_head_stride = 2 * kPrefillHeadDimV;
  p.spans = d_spans.data();
  p.num_spans = c.batch;
  p.max_span_q_count = c.seqlen;
  p.tile_rows = c.tile_rows;

  PrefillBenchRow row;
  row.config = c;
  row.tile_rows = kernels::prefill_attention_launch_shape(p).tile_rows;
  row.us = timer.median_us([&] { kernels::launch_prefill_attention(p, stream); }, runs);
  row.flops = 2.0 * (kPrefillHeadDimQK + kPrefillHeadDimV) * double(c.seqlen) * c.seqlen / 2 *
              heads * c.batch;
  row.tflops = row.flops / (row.us * 1e-6) / 1e12;
  return row;
}

}  // namespace

std::vector<PrefillBenchRow> run_prefill_bench(const PrefillBenchOptions& options,
                                               cudaStream_t stream) {
  EventTimer timer(stream);
  std::vector<PrefillBenchRow> rows;
  const std::vector<PrefillBenchCase> cases =
      options.only ? std::vector<PrefillBenchCase>{*options.only} : prefill_bench_sweep();
  for (PrefillBenchCase c : cases) {
    if (options.tile_rows != 0) c.tile_rows = options.tile_rows;
    rows.push_back(run_case(c, options.runs, timer, stream));
  }
  return rows;
}

std::string prefill_table_header() {
  return fmt::format("{:>5} {:>7} {:>5} {:>10} {:>9}", "heads", "seqlen", "batch", "µs", "TFLOP/s");
}

std::string prefill_table_line(const PrefillBenchRow& row) {
  return fmt::format("{:>5} {:>7} {:>5} {:>5} {:>10.1f} {:>9.1f}", row.config.num_heads,
                     row.config.seqlen, row.config.batch, row.tile_rows, row.us, row.tflops);
}

nlohmann::json prefill_bench_json(const std::string& gpu, const std::string& date,
                                  const std::string& commit,
                                  const std::vector<PrefillBenchRow>& rows) {
  nlohmann::json json;
  json["what"] = "mla bench prefill: causal prefill attention, d_qk 192 / d_v 128, bf16";
  json["gpu"] = gpu;
  json["date"] = date;
  json["commit"] = commit;
  json["flops"] = "2*(192+128)*seqlen^2/2*heads*batch (causal counted as half)";
  nlohmann::json list = nlohmann::json::array();
  for (const PrefillBenchRow& row : rows)
    list.push_back({{"heads", row.config.num_heads},
                    {"seqlen", row.config.seqlen},
                    {"batch", row.config.batch},
                    {"tile_rows", row.tile_rows},
                    {"us", row.us},
                    {"tflops", row.tflops}});
  json["rows"] = list;
  return json;
}

}  // namespace mla::bench
