// capture_decode_pair_trace(), format_decode_pair_trace(); see decode_pair_trace.h.
#include "bench/decode_pair_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "bench/timing.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace mla::bench {
namespace {

constexpr int kPairs = kernels::kDecodePairTracePairs;
constexpr int kEvents = kernels::kDecodePairTraceEvents;

// One CTA's run, from its kernels::kDecodePairTracePairWords pair words `t`: medians over pairs
// i ≥ 1 that have every event of both warpgroups and whose next pair started (pair 0 starts the
// pipeline; the last recorded pair has no next start).
DecodePairTrace summarize_run(const uint64_t* t) {
  auto at = [&](int group, int pair, int event) {
    return t[(size_t(group) * kPairs + pair) * kEvents + event];
  };
  std::vector<double> period;
  std::array<std::array<std::vector<double>, kEvents>, 2> offsets;
  for (int pair = 1; pair + 1 < kPairs; ++pair) {
    bool full = at(0, pair + 1, 0) != 0;
    for (int group = 0; group < 2; ++group)
      for (int event = 0; event < kEvents; ++event) full = full && at(group, pair, event) != 0;
    if (!full) continue;
    const double start = double(at(0, pair, 0));
    period.push_back(double(at(0, pair + 1, 0)) - start);
    for (int group = 0; group < 2; ++group)
      for (int event = 0; event < kEvents; ++event)
        offsets[group][event].push_back(double(at(group, pair, event)) - start);
  }
  DecodePairTrace run;
  run.pairs = static_cast<int>(period.size());
  if (period.empty()) return run;
  run.period_cycles = median(period);
  for (int group = 0; group < 2; ++group)
    for (int event = 0; event < kEvents; ++event)
      run.event_cycles[group][event] = median(offsets[group][event]);
  return run;
}

// One CTA's pieces in one run, from its piece words (kernels::kDecodePieceTraceFields a piece).
struct CtaPieces {
  std::vector<DecodePairTrace::Piece> pieces;  // complete pieces, in order, until the first gap
  double cycles = 0, pairs_cycles = 0, pairs = 0;
  bool every_slot_used = false;  // it may have had more pieces than the trace records
};

CtaPieces summarize_pieces(const uint64_t* words) {
  constexpr int kFields = kernels::kDecodePieceTraceFields;
  CtaPieces cta;
  uint64_t first_start = 0, last_written = 0;
  for (int k = 0; k < kernels::kDecodePieceTracePieces; ++k) {
    const uint64_t* f = words + k * kFields;
    bool complete = true;
    for (int e = 0; e < kernels::kDecodePieceTraceEvents; ++e) complete = complete && f[e] != 0;
    if (!complete) break;
    DecodePairTrace::Piece piece;
    piece.ctas = 1;
    piece.pages = double(f[kernels::kDecodePieceTraceEvents]);
    piece.queries_cycles = double(f[1]) - double(f[0]);
    piece.first_page_cycles = double(f[2]) - double(f[0]);
    piece.pairs_cycles = double(f[3]) - double(f[2]);
    piece.cycles_per_pair = piece.pairs_cycles / (piece.pages / 2);
    piece.epilogue_cycles = double(f[4]) - double(f[3]);
    if (k + 1 < kernels::kDecodePieceTracePieces && f[kFields] != 0)
      piece.to_next_cycles = double(f[kFields]) - double(f[4]);
    if (k == 0) first_start = f[0];
    last_written = f[4];
    cta.pairs_cycles += piece.pairs_cycles;
    cta.pairs += piece.pages / 2;
    cta.pieces.push_back(piece);
  }
  if (!cta.pieces.empty()) cta.cycles = double(last_written) - double(first_start);
  cta.every_slot_used = int(cta.pieces.size()) == kernels::kDecodePieceTracePieces;
  return cta;
}

}  // namespace

DecodePairTrace capture_decode_pair_trace(const kernels::MlaDecodeParams& params, int runs,
                                          cudaStream_t stream, int piece) {
  MLA_CHECK_GE(runs, 1);
  const int64_t words = kernels::decode_pair_trace_words(params);
  const int64_t ctas = words / kernels::kDecodePairTraceWords;
  cuda::DeviceBuffer<uint64_t> trace(static_cast<size_t>(words));
  L2Flush flush;
  std::vector<DecodePairTrace> per_cta_run;   // every CTA with a complete pair, every run
  std::vector<CtaPieces> pieces_per_cta_run;  // every CTA with a complete piece, every run
  std::vector<double> recording, first_cta_periods;
  for (int run = 0; run < runs; ++run) {
    MLA_CUDA_CHECK(cudaMemsetAsync(trace.data(), 0, trace.bytes(), stream));
    flush.enqueue(stream, size_t(run));
    kernels::launch_mla_decode_with_pair_trace(params, trace.data(), stream, piece);
    const std::vector<uint64_t> all = trace.to_host(stream);
    int recorded = 0;
    for (int64_t cta = 0; cta < ctas; ++cta) {
      CtaPieces cta_pieces = summarize_pieces(all.data() + cta * kernels::kDecodePairTraceWords +
                                              kernels::kDecodePairTracePairWords);
      if (!cta_pieces.pieces.empty()) pieces_per_cta_run.push_back(std::move(cta_pieces));
      const DecodePairTrace one = summarize_run(all.data() + cta * kernels::kDecodePairTraceWords);
      if (one.pairs == 0) continue;
      ++recorded;
      per_cta_run.push_back(one);
      if (cta == 0) first_cta_periods.push_back(one.period_cycles);
    }
    recording.push_back(recorded);
  }
  DecodePairTrace result;
  result.piece = piece;
  result.ctas = static_cast<int>(median(recording));
  if (!pieces_per_cta_run.empty()) {
    auto cta_median = [&](const auto& get) { return median_over(pieces_per_cta_run, get); };
    result.cta_cycles = cta_median([](const CtaPieces& c) { return c.cycles; });
    result.cta_pairs_share =
        cta_median([](const CtaPieces& c) { return c.pairs_cycles / c.cycles; });
    result.cta_cycles_per_pair =
        cta_median([](const CtaPieces& c) { return c.pairs_cycles / c.pairs; });
    result.cta_pieces = cta_median([](const CtaPieces& c) { return double(c.pieces.size()); });
    for (const CtaPieces& c : pieces_per_cta_run)
      result.pieces_truncated = result.pieces_truncated || c.every_slot_used;
    for (int k = 0; k < kernels::kDecodePieceTracePieces; ++k) {
      std::vector<DecodePairTrace::Piece> kth, with_next;
      for (const CtaPieces& c : pieces_per_cta_run) {
        if (int(c.pieces.size()) <= k) continue;
        kth.push_back(c.pieces[size_t(k)]);
        if (int(c.pieces.size()) > k + 1) with_next.push_back(c.pieces[size_t(k)]);
      }
      if (kth.empty()) break;
      using Piece = DecodePairTrace::Piece;
      Piece m;
      m.ctas = static_cast<int>((kth.size() + size_t(runs) - 1) / size_t(runs));
      for (double Piece::*field :
           {&Piece::pages, &Piece::queries_cycles, &Piece::first_page_cycles, &Piece::pairs_cycles,
            &Piece::cycles_per_pair, &Piece::epilogue_cycles})
        m.*field = median_over(kth, [&](const Piece& x) { return x.*field; });
      if (!with_next.empty())
        m.to_next_cycles = median_over(with_next, [](const Piece& x) { return x.to_next_cycles; });
      result.pieces.push_back(m);
    }
  }
  if (per_cta_run.empty()) return result;
  auto median_of = [&](const auto& get) { return median_over(per_cta_run, get); };
  result.pairs = static_cast<int>(median_of([](const DecodePairTrace& r) { return r.pairs; }));
  std::vector<double> periods;
  for (const DecodePairTrace& r : per_cta_run) periods.push_back(r.period_cycles);
  std::sort(periods.begin(), periods.end());
  result.period_cycles = median(periods);
  result.period_p10_cycles = periods[periods.size() / 10];
  result.period_p90_cycles = periods[periods.size() * 9 / 10];
  if (!first_cta_periods.empty()) result.first_cta_period_cycles = median(first_cta_periods);
  for (int group = 0; group < 2; ++group)
    for (int event = 0; event < kEvents; ++event)
      result.event_cycles[group][event] =
          median_of([&](const DecodePairTrace& r) { return r.event_cycles[group][event]; });
  return result;
}

std::string format_decode_pair_trace(const DecodePairTrace& trace, const std::string& label,
                                     int sm_clock_khz) {
  const double cycles_per_us = sm_clock_khz * 1e-3;
  std::string pieces_text;
  if (!trace.pieces.empty()) {
    pieces_text = fmt::format(
        "piece trace, {} (every CTA's pieces whole, thread 0; medians over the CTAs and runs, "
        "cycles): a CTA runs {:.0f} pieces in {:.0f} cycles ({:.1f} µs at {} MHz), {:.1f} % of "
        "them from a first page landing to warpgroup 0's last P·V, at {:.0f} cycles a pair over "
        "all its pieces{}\n",
        label, trace.cta_pieces, trace.cta_cycles, trace.cta_cycles / cycles_per_us,
        sm_clock_khz / 1000, 100.0 * trace.cta_pairs_share, trace.cta_cycles_per_pair,
        trace.pieces_truncated
            ? fmt::format(" (some CTA filled all {} recorded pieces: later ones are left out)",
                          kernels::kDecodePieceTracePieces)
            : "");
    pieces_text += fmt::format("  {:>5} {:>6} {:>6} {:>14} {:>17} {:>18} {:>17} {:>13}\n", "piece",
                               "CTAs", "pages", "start→queries", "start→first page",
                               "pairs (a pair)", "last P·V→copies", "copies→next");
    for (size_t k = 0; k < trace.pieces.size(); ++k) {
      const DecodePairTrace::Piece& p = trace.pieces[k];
      pieces_text += fmt::format(
          "  {:>5} {:>6} {:>6.0f} {:>14.0f} {:>17.0f} {:>11.0f} ({:>5.0f}) {:>17.0f} {:>13.0f}\n",
          k, p.ctas, p.pages, p.queries_cycles, p.first_page_cycles, p.pairs_cycles,
          p.cycles_per_pair, p.epilogue_cycles, p.to_next_cycles);
    }
  }
  if (trace.pairs == 0)
    return fmt::format(
               "pair trace, {}: no CTA has a measured pair (a pair i ≥ 1 whose next pair started) "
               "in its piece {}\n",
               label, trace.piece) +
           pieces_text;
  std::string text = fmt::format(
      "pair trace, {} (piece {} of each CTA: {} CTAs with complete pairs, {} pairs each; medians "
      "over the CTAs and runs; cycles after warpgroup 0's pair start, µs at {} MHz): one pair "
      "every {:.0f} cycles ({:.2f} µs; over the CTAs p10 {:.0f}, p90 {:.0f}; CTA (0, 0) {:.0f}); "
      "its tensor work at the peak (2 pages × 36 m64n64k16 + 8 m64n256k16 ≈ 4,352 cycles) would "
      "take {:.0f} %\n",
      label, trace.piece, trace.ctas, trace.pairs, sm_clock_khz / 1000, trace.period_cycles,
      trace.period_cycles / cycles_per_us, trace.period_p10_cycles, trace.period_p90_cycles,
      trace.first_cta_period_cycles, 100.0 * 4352 / trace.period_cycles);
  struct Line {
    double cycles;
    int group, event;
  };
  std::vector<Line> lines;
  for (int group = 0; group < 2; ++group)
    for (int event = 0; event < kEvents; ++event)
      lines.push_back({trace.event_cycles[group][event], group, event});
  std::stable_sort(lines.begin(), lines.end(),
                   [](const Line& a, const Line& b) { return a.cycles < b.cycles; });
  for (const Line& line : lines) {
    text += fmt::format("  {:>7.0f} cycles {:>6.2f} µs  {}warpgroup {}: {}\n", line.cycles,
                        line.cycles / cycles_per_us, line.group == 0 ? "" : "            ",
                        line.group, kernels::decode_pair_trace_event(line.group, line.event));
  }
  return text + pieces_text;
}

}  // namespace mla::bench
