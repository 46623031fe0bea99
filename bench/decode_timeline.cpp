// capture_decode_timeline(), format_decode_timeline(); see decode_timeline.h.
#include "bench/decode_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bench/timing.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "mla/kernels/sm_stream.h"
#include "mla/kernels/timestamp.h"

namespace mla::bench {
namespace {

constexpr int kSlots = kernels::kDecodeTimelineSlots;
constexpr const char* kPhaseNames[kSlots] = {"entry",
                                             "first piece known",
                                             "queries loaded",
                                             "first page landed",
                                             "pages computed",
                                             "output stored",
                                             "exit"};
constexpr int kCombineSlots = kernels::kDecodeCombineTimelineSlots;
constexpr const char* kCombinePhaseNames[kCombineSlots] = {"start", "past the wait", "end"};
constexpr int kQueriesSlot = 2;    // a CTA that loaded queries had a piece of work
constexpr int kPagesDoneSlot = 4;  // "pages computed" (kTimelinePagesDone in mla_decode/config.h)

// b − a in µs for two %globaltimer stamps (ns). Subtracted as integers first: near 1.7e18 ns a
// double holds a stamp only to 256 ns.
double elapsed_us(uint64_t a, uint64_t b) {
  return double(int64_t(b - a)) * 1e-3;
}

const uint64_t* cta_stamps(const std::vector<uint64_t>& words, size_t cta) {
  return words.data() + kernels::decode_timeline_stamps_word(int64_t(cta));
}

// Per CTA with work, its "pages computed" stamp in µs after `start` (0 for a CTA without work).
std::vector<double> finish_times(const std::vector<uint64_t>& words, size_t ctas, uint64_t start) {
  std::vector<double> times(ctas, 0.0);
  for (size_t cta = 0; cta < ctas; ++cta) {
    const uint64_t* ns = cta_stamps(words, cta);
    if (ns[kQueriesSlot] != 0 && ns[kPagesDoneSlot] != 0)
      times[cta] = elapsed_us(start, ns[kPagesDoneSlot]);
  }
  return times;
}

// The same finish times keyed by the SM each CTA ran on (the latest CTA's, where several shared
// one), over SM ids 0 .. num_sm_ids - 1.
std::vector<double> finish_times_by_sm(const std::vector<uint64_t>& words, size_t ctas,
                                       const std::vector<double>& by_cta, size_t num_sm_ids) {
  std::vector<double> times(num_sm_ids, 0.0);
  for (size_t cta = 0; cta < ctas; ++cta) {
    const uint64_t sm = words[kernels::decode_timeline_sm_word(int64_t(ctas), int64_t(cta))];
    if (sm < num_sm_ids && by_cta[cta] != 0) times[sm] = std::max(times[sm], by_cta[cta]);
  }
  return times;
}

// Each entry's mean over the runs where it is non-zero (0 where it never is).
std::vector<double> means_over_runs(const std::vector<std::vector<double>>& runs) {
  std::vector<double> means(runs.front().size(), 0.0);
  for (size_t i = 0; i < means.size(); ++i) {
    double sum = 0, count = 0;
    for (const std::vector<double>& run : runs)
      if (run[i] != 0) sum += run[i], count += 1;
    if (count > 0) means[i] = sum / count;
  }
  return means;
}

// Pearson correlation of a and b over the entries where both are non-zero; NaN with fewer than
// two such entries or no variance (not "uncorrelated").
double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  double n = 0, sa = 0, sb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != 0 && b[i] != 0) n += 1, sa += a[i], sb += b[i];
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (n < 2) return nan;
  const double ma = sa / n, mb = sb / n;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 0 || b[i] == 0) continue;
    cov += (a[i] - ma) * (b[i] - mb);
    va += (a[i] - ma) * (a[i] - ma);
    vb += (b[i] - mb) * (b[i] - mb);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : nan;
}

// The median over pairs of consecutive runs of correlation() between them; NaN when no pair has
// one.
double median_correlation_between_runs(const std::vector<std::vector<double>>& runs) {
  std::vector<double> correlations;
  for (size_t run = 1; run < runs.size(); ++run) {
    const double c = correlation(runs[run - 1], runs[run]);
    if (!std::isnan(c)) correlations.push_back(c);
  }
  return correlations.empty() ? std::numeric_limits<double>::quiet_NaN() : median(correlations);
}

// min / median / max over the non-zero entries (0s when there are none).
std::array<double, 3> min_median_max(const std::vector<double>& values) {
  std::vector<double> present;
  for (double v : values)
    if (v != 0) present.push_back(v);
  if (present.empty()) return {0, 0, 0};
  return {*std::min_element(present.begin(), present.end()), median(present),
          *std::max_element(present.begin(), present.end())};
}

// max − min over the non-zero entries.
double spread(const std::vector<double>& values) {
  const std::array<double, 3> range = min_median_max(values);
  return range[2] - range[0];
}

// One run's numbers (the DecodeTimeline of that run alone): `ctas` split CTAs, then
// `combine_ctas` combine CTAs' stamps.
DecodeTimeline summarize_run(const std::vector<uint64_t>& words, size_t ctas, size_t combine_ctas,
                             uint64_t start, uint64_t end, int sm_clock_khz) {
  DecodeTimeline run;
  run.ctas = static_cast<int>(ctas);
  run.op_end_us = elapsed_us(start, end);
  const double cycles_per_us = sm_clock_khz * 1e-3;
  for (int slot = 0; slot < kSlots; ++slot) {
    std::vector<double> reached, phase;
    for (int cta = 0; cta < run.ctas; ++cta) {
      const uint64_t* ns = cta_stamps(words, size_t(cta));
      const uint64_t* clk = ns + kSlots;
      if (ns[slot] == 0) continue;
      reached.push_back(elapsed_us(start, ns[slot]));
      const bool has_work = ns[kQueriesSlot] != 0;
      if (slot > 0 && has_work && clk[slot - 1] != 0)
        phase.push_back(double(clk[slot] - clk[slot - 1]) / cycles_per_us);
    }
    if (!reached.empty())
      run.reached_us[slot] = {*std::min_element(reached.begin(), reached.end()), median(reached),
                              *std::max_element(reached.begin(), reached.end())};
    if (!phase.empty()) run.phase_us[slot] = median(phase);
  }
  std::vector<double> clock_mhz;
  for (int cta = 0; cta < run.ctas; ++cta) {
    const uint64_t* ns = cta_stamps(words, size_t(cta));
    const uint64_t* clk = ns + kSlots;
    if (ns[kQueriesSlot] == 0) continue;
    ++run.ctas_with_work;
    const int exit = kSlots - 1;
    if (ns[exit] > ns[0] && clk[exit] > clk[0])
      clock_mhz.push_back(double(clk[exit] - clk[0]) / double(ns[exit] - ns[0]) * 1e3);
  }
  if (!clock_mhz.empty()) run.clock64_rate_mhz = median(clock_mhz);

  // The launched combine's CTAs (none stamp when the combine is fused).
  std::array<std::vector<double>, kCombineSlots> combine;
  for (size_t c = 0; c < combine_ctas; ++c) {
    const uint64_t* t =
        words.data() + kernels::decode_timeline_combine_word(int64_t(ctas), int64_t(c));
    if (t[0] == 0) continue;
    for (int slot = 0; slot < kCombineSlots; ++slot)
      if (t[slot] != 0) combine[size_t(slot)].push_back(elapsed_us(start, t[slot]));
  }
  run.combine_ctas = static_cast<int>(combine[0].size());
  for (int slot = 0; slot < kCombineSlots; ++slot)
    run.combine_us[size_t(slot)] = min_median_max(combine[size_t(slot)]);
  return run;
}

// The streaming kernel's per-SM rates (GB/s, keyed by SM id, 0 for an id not seen), one vector per
// run: one CTA per SM of `num_sms`, kStreamBytesPerCta each, after an L2 flush.
constexpr size_t kStreamBytesPerCta = size_t(8) << 20;
std::vector<std::vector<double>> stream_rates_by_sm(int num_sms, int runs, size_t num_sm_ids,
                                                    L2Flush& flush, cudaStream_t stream) {
  const size_t words_per_cta = kStreamBytesPerCta / sizeof(uint64_t);
  cuda::DeviceBuffer<uint64_t> src(words_per_cta * size_t(num_sms));
  MLA_CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, src.bytes(), stream));
  cuda::DeviceBuffer<uint64_t> records(size_t(num_sms) * kernels::kSmStreamRecordWords);
  std::vector<std::vector<double>> rates;
  for (int run = 0; run < runs; ++run) {
    flush.enqueue(stream, size_t(run));
    kernels::launch_sm_stream(src.data(), words_per_cta, num_sms, records.data(), stream);
    const std::vector<uint64_t> host = records.to_host(stream);
    std::vector<double> by_sm(num_sm_ids, 0.0);
    for (int cta = 0; cta < num_sms; ++cta) {
      const uint64_t* record = host.data() + size_t(cta) * kernels::kSmStreamRecordWords;
      const double us = elapsed_us(record[1], record[2]);
      if (record[0] < num_sm_ids && us > 0)
        by_sm[record[0]] = double(kStreamBytesPerCta) / us * 1e-3;
    }
    rates.push_back(std::move(by_sm));
  }
  return rates;
}

}  // namespace

DecodeTimeline capture_decode_timeline(const kernels::MlaDecodeParams& params, int runs,
                                       int sm_clock_khz, cudaStream_t stream) {
  MLA_CHECK_GE(runs, 1);
  const int64_t words = kernels::mla_decode_timeline_words(params);
  const auto split_ctas = static_cast<size_t>(kernels::decode_timeline_split_ctas(params));
  const auto combine_ctas = static_cast<size_t>(kernels::decode_timeline_combine_ctas(params));
  cuda::DeviceBuffer<uint64_t> timeline(static_cast<size_t>(words)), stamps(2);
  L2Flush flush;
  std::vector<DecodeTimeline> per_run;
  std::vector<std::vector<double>> finishes;        // per run, per CTA
  std::vector<std::vector<double>> finishes_by_sm;  // per run, per SM id
  const size_t num_sm_ids = static_cast<size_t>(std::max(params.num_sms, 1)) * 2;
  for (int run = 0; run < runs; ++run) {
    MLA_CUDA_CHECK(cudaMemsetAsync(timeline.data(), 0, timeline.bytes(), stream));
    flush.enqueue(stream, size_t(run));
    kernels::launch_timestamp(stamps.data(), stream);
    kernels::launch_mla_decode_with_timeline(params, timeline.data(), stream);
    kernels::launch_timestamp(stamps.data() + 1, stream);
    const std::vector<uint64_t> host = timeline.to_host(stream);
    const std::vector<uint64_t> bracket = stamps.to_host(stream);
    per_run.push_back(
        summarize_run(host, split_ctas, combine_ctas, bracket[0], bracket[1], sm_clock_khz));
    finishes.push_back(finish_times(host, split_ctas, bracket[0]));
    finishes_by_sm.push_back(finish_times_by_sm(host, split_ctas, finishes.back(), num_sm_ids));
  }
  // Median over runs, number by number.
  DecodeTimeline result = per_run.front();
  auto median_of = [&](const auto& get) { return median_over(per_run, get); };
  result.op_end_us = median_of([](const DecodeTimeline& t) { return t.op_end_us; });
  result.clock64_rate_mhz = median_of([](const DecodeTimeline& t) { return t.clock64_rate_mhz; });
  result.combine_ctas =
      static_cast<int>(median_of([](const DecodeTimeline& t) { return double(t.combine_ctas); }));
  for (int slot = 0; slot < kCombineSlots; ++slot)
    for (int k = 0; k < 3; ++k)
      result.combine_us[size_t(slot)][size_t(k)] =
          median_of([&](const DecodeTimeline& t) { return t.combine_us[size_t(slot)][size_t(k)]; });
  for (int slot = 0; slot < kSlots; ++slot) {
    for (int k = 0; k < 3; ++k)
      result.reached_us[slot][k] =
          median_of([&](const DecodeTimeline& t) { return t.reached_us[slot][k]; });
    result.phase_us[slot] = median_of([&](const DecodeTimeline& t) { return t.phase_us[slot]; });
  }
  std::vector<double> spreads;
  for (const std::vector<double>& run : finishes) spreads.push_back(spread(run));
  result.finish_runs = int(finishes.size());
  result.finish_correlation = median_correlation_between_runs(finishes);
  result.finish_spread_of_means_us = spread(means_over_runs(finishes));
  result.finish_spread_us = median(spreads);
  result.finish_correlation_by_sm = median_correlation_between_runs(finishes_by_sm);
  const std::vector<double> finish_by_sm = means_over_runs(finishes_by_sm);
  result.finish_spread_of_sm_means_us = spread(finish_by_sm);

  const std::vector<std::vector<double>> rates =
      stream_rates_by_sm(std::max(params.num_sms, 1), runs, num_sm_ids, flush, stream);
  const std::vector<double> rate_by_sm = means_over_runs(rates);
  result.stream_runs = int(rates.size());
  result.stream_rate_gbps = min_median_max(rate_by_sm);
  result.stream_correlation_by_sm = median_correlation_between_runs(rates);
  result.stream_rate_vs_finish_correlation = correlation(rate_by_sm, finish_by_sm);
  return result;
}

std::string format_decode_timeline(const DecodeTimeline& timeline, const std::string& label) {
  std::string text = fmt::format(
      "timeline {}: {} of {} split-KV CTAs have work; µs after the stamp before the op (min / "
      "median / max over CTAs), and the phase's median length inside a CTA (clock64)\n",
      label, timeline.ctas_with_work, timeline.ctas);
  for (int slot = 0; slot < kSlots; ++slot) {
    const auto& r = timeline.reached_us[slot];
    text += fmt::format("  {:<18} {:7.2f} {:7.2f} {:7.2f}", kPhaseNames[slot], r[0], r[1], r[2]);
    if (slot > 0) text += fmt::format("   phase {:6.2f}", timeline.phase_us[slot]);
    text += "\n";
  }
  text += fmt::format("  {:<18} {:7.2f}  (the stamp after the op: combine included)\n", "op end",
                      timeline.op_end_us);
  text += fmt::format(
      "  clock64 rate from entry to exit (cycles over %globaltimer ns, median CTA): {:.0f} MHz\n",
      timeline.clock64_rate_mhz);
  if (timeline.combine_ctas > 0) {
    text += fmt::format("  combine, {} CTAs (min / median / max over them; end: thread 0's):",
                        timeline.combine_ctas);
    for (int slot = 0; slot < kCombineSlots; ++slot) {
      const auto& c = timeline.combine_us[size_t(slot)];
      text += fmt::format(" {} {:.2f} / {:.2f} / {:.2f}{}", kCombinePhaseNames[slot], c[0], c[1],
                          c[2], slot + 1 < kCombineSlots ? ";" : "\n");
    }
  }
  text += fmt::format(
      "  CTAs' finish (pages computed) over {} runs: correlation between consecutive runs {:.2f} "
      "(median over the pairs of runs); spread {:.2f} µs in a run (median), {:.2f} µs of the "
      "per-CTA means\n",
      timeline.finish_runs, timeline.finish_correlation, timeline.finish_spread_us,
      timeline.finish_spread_of_means_us);
  text += fmt::format(
      "  the same by the SM each CTA ran on: correlation {:.2f}, spread of the per-SM means "
      "{:.2f} µs\n",
      timeline.finish_correlation_by_sm, timeline.finish_spread_of_sm_means_us);
  const auto& r = timeline.stream_rate_gbps;
  text += fmt::format(
      "  a streaming kernel on every SM at once ({} runs of {} MB per SM): per-SM rate {:.1f} / "
      "{:.1f} / {:.1f} GB/s (min / median / max), correlation by SM between runs {:.2f}; with the "
      "decode's per-SM finish {:.2f}\n",
      timeline.stream_runs, kStreamBytesPerCta >> 20, r[0], r[1], r[2],
      timeline.stream_correlation_by_sm, timeline.stream_rate_vs_finish_correlation);
  return text;
}

}  // namespace mla::bench
