// make_decode_plan_host(): the decode plan computed by plain loops (no CUDA needed).
#include <algorithm>

#include "mla/kernels/mla_decode_plan.h"

namespace mla::kernels {
namespace {

// The first sequence whose cost interval ends after `unit`.
int32_t first_seq_after(const int32_t* cost_begin, int batch, int unit) {
  return static_cast<int32_t>(std::upper_bound(cost_begin + 1, cost_begin + batch + 1, unit) -
                              (cost_begin + 1));
}

// The sequence-aligned plan's pages per part T, or 0 when it is not taken (mla_decode_plan.h).
// max_pieces: the most pieces it may make (0: no limit).
int aligned_pages_per_part(const std::vector<int>& pages, int num_parts, int balanced_share,
                           bool allowed, int min_cost_per_part, int64_t max_pieces) {
  int64_t total_pages = 0;
  int busy = 0;
  for (int n : pages) {
    total_pages += n;
    busy += n > 0 ? 1 : 0;
  }
  if (!aligned_plan_tried(allowed, min_cost_per_part, busy, num_parts)) return 0;
  const int first = aligned_first_candidate(total_pages, num_parts);
  for (int t = first; t <= aligned_last_candidate(first, balanced_share); ++t) {
    int64_t needed = 0;
    for (int n : pages) needed += aligned_parts_of(n, t);
    if (aligned_candidate_fits(needed, num_parts, max_pieces)) return t;
  }
  return 0;
}

}  // namespace

std::vector<int32_t> make_decode_plan_host(const int32_t* seqlens, int batch, int num_parts,
                                           int max_pages_per_seq, int min_cost_per_part,
                                           bool sequence_aligned, int rows_per_tile) {
  std::vector<int32_t> plan(decode_plan_ints(batch, num_parts), 0);
  int32_t* header = plan.data();
  int32_t* cost_begin = header + kDecodePlanHeaderInts;
  int32_t* split_begin = cost_begin + batch + 1;
  int32_t* part_first_seq = split_begin + batch + 1;
  std::vector<int> pages(batch);
  int total_cost = 0;
  int max_seq_cost = 0;
  for (int seq = 0; seq < batch; ++seq) {
    pages[seq] = num_pages_of(clamp_seqlen(seqlens[seq], max_pages_per_seq));
    total_cost += seq_cost(pages[seq]);
    max_seq_cost = std::max(max_seq_cost, seq_cost(pages[seq]));
  }
  int per_part = cost_per_part(total_cost, num_parts, min_cost_per_part, max_seq_cost);
  int64_t max_pieces = 0;  // the balanced plan's pieces, where they cap the aligned plan's
  if (aligned_pieces_capped(rows_per_tile)) {
    int cost = 0;
    for (int seq = 0; seq < batch; ++seq) {
      max_pieces += num_splits_of(cost, pages[seq], per_part, kDecodeFixedCostPages);
      cost += seq_cost(pages[seq]);
    }
  }
  const int aligned = aligned_pages_per_part(pages, num_parts, per_part, sequence_aligned,
                                             min_cost_per_part, max_pieces);
  const int page_offset = aligned > 0 ? 0 : kDecodeFixedCostPages;
  if (aligned > 0) per_part = aligned;
  for (int seq = 0; seq < batch; ++seq)
    cost_begin[seq + 1] = cost_begin[seq] + (aligned > 0 ? aligned_seq_cost(pages[seq], aligned)
                                                         : seq_cost(pages[seq]));
  for (int seq = 0; seq < batch; ++seq)
    split_begin[seq + 1] =
        split_begin[seq] + num_splits_of(cost_begin[seq], pages[seq], per_part, page_offset);
  for (int part = 0; part < num_parts; ++part)
    part_first_seq[part] = first_seq_after(cost_begin, batch, part * per_part);
  header[0] = per_part;
  header[1] = split_begin[batch];
  header[2] = batch;
  header[3] = num_parts;
  header[4] = page_offset;
  const DecodePlanView view{plan.data(), batch, num_parts};
  auto* records = reinterpret_cast<DecodePartRecord*>(plan.data() +
                                                      decode_part_records_offset(batch, num_parts));
  for (int part = 0; part < num_parts; ++part)
    records[part] = first_piece_record(view, seqlens, max_pages_per_seq, part);
  return plan;
}

}  // namespace mla::kernels
