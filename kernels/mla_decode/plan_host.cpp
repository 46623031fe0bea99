// make_decode_plan_host(): the decode plan computed by plain loops (no CUDA needed).
#include <algorithm>

#include "mla/kernels/mla_decode_plan.h"

namespace mla::kernels {
namespace {

// cost_begin[0..batch] (the cost prefix); returns each sequence's page count.
std::vector<int> fill_cost_begin(const int32_t* seqlens, int batch, int max_pages_per_seq,
                                 int32_t* cost_begin) {
  std::vector<int> pages(batch);
  for (int seq = 0; seq < batch; ++seq) {
    pages[seq] = num_pages_of(clamp_seqlen(seqlens[seq], max_pages_per_seq));
    cost_begin[seq + 1] = cost_begin[seq] + seq_cost(pages[seq]);
  }
  return pages;
}

// The first sequence whose cost interval ends after `unit`.
int32_t first_seq_after(const int32_t* cost_begin, int batch, int unit) {
  return static_cast<int32_t>(std::upper_bound(cost_begin + 1, cost_begin + batch + 1, unit) -
                              (cost_begin + 1));
}

// Writes the header [C, total_splits, batch, num_parts]; returns where the records go.
DecodePartRecord* write_header(std::vector<int32_t>& plan, int cost_per_part, int total_splits,
                               int batch, int num_parts) {
  plan[0] = cost_per_part;
  plan[1] = total_splits;
  plan[2] = batch;
  plan[3] = num_parts;
  return reinterpret_cast<DecodePartRecord*>(plan.data() +
                                             decode_part_records_offset(batch, num_parts));
}

}  // namespace

std::vector<int32_t> make_decode_plan_host(const int32_t* seqlens, int batch, int num_parts,
                                           int max_pages_per_seq, int min_cost_per_part) {
  std::vector<int32_t> plan(decode_plan_ints(batch, num_parts), 0);
  int32_t* cost_begin = plan.data() + kDecodePlanHeaderInts;
  int32_t* split_begin = cost_begin + batch + 1;
  int32_t* part_first_seq = split_begin + batch + 1;
  const std::vector<int> pages = fill_cost_begin(seqlens, batch, max_pages_per_seq, cost_begin);
  int max_seq_cost = 0;
  for (int seq = 0; seq < batch; ++seq) max_seq_cost = std::max(max_seq_cost, seq_cost(pages[seq]));
  const int per_part = cost_per_part(cost_begin[batch], num_parts, min_cost_per_part, max_seq_cost);
  for (int seq = 0; seq < batch; ++seq)
    split_begin[seq + 1] = split_begin[seq] + num_splits_of(cost_begin[seq], pages[seq], per_part);
  for (int part = 0; part < num_parts; ++part)
    part_first_seq[part] = first_seq_after(cost_begin, batch, part * per_part);
  DecodePartRecord* records = write_header(plan, per_part, split_begin[batch], batch, num_parts);
  const DecodePlanView view{plan.data(), batch, num_parts};
  for (int part = 0; part < num_parts; ++part)
    records[part] = first_piece_record(view, seqlens, max_pages_per_seq, part);
  return plan;
}

}  // namespace mla::kernels
