// make_decode_plan_host(): the decode plan computed by plain loops (no CUDA needed).
#include <algorithm>

#include "mla/kernels/mla_decode_plan.h"

namespace mla::kernels {

std::vector<int32_t> make_decode_plan_host(const int32_t* seqlens, int batch, int num_parts,
                                           int max_pages_per_seq, int min_cost_per_part) {
  std::vector<int32_t> plan(decode_plan_ints(batch, num_parts), 0);
  int32_t* cost_begin = plan.data() + kDecodePlanHeaderInts;
  int32_t* split_begin = cost_begin + batch + 1;
  int32_t* part_first_seq = split_begin + batch + 1;
  std::vector<int> pages(batch);
  int max_seq_cost = 0;
  for (int seq = 0; seq < batch; ++seq) {
    pages[seq] = num_pages_of(clamp_seqlen(seqlens[seq], max_pages_per_seq));
    cost_begin[seq + 1] = cost_begin[seq] + seq_cost(pages[seq]);
    max_seq_cost = std::max(max_seq_cost, seq_cost(pages[seq]));
  }
  const int per_part = cost_per_part(cost_begin[batch], num_parts, min_cost_per_part, max_seq_cost);
  for (int seq = 0; seq < batch; ++seq)
    split_begin[seq + 1] = split_begin[seq] + num_splits_of(cost_begin[seq], pages[seq], per_part);
  for (int part = 0; part < num_parts; ++part) {
    const int unit = part * per_part;
    // First sequence whose cost interval ends after `unit`.
    part_first_seq[part] = static_cast<int32_t>(
        std::upper_bound(cost_begin + 1, cost_begin + batch + 1, unit) - (cost_begin + 1));
  }
  plan[0] = per_part;
  plan[1] = split_begin[batch];
  plan[2] = batch;
  plan[3] = num_parts;
  const DecodePlanView view{plan.data(), batch, num_parts};
  auto* records = reinterpret_cast<DecodePartRecord*>(plan.data() +
                                                      decode_part_records_offset(batch, num_parts));
  for (int part = 0; part < num_parts; ++part)
    records[part] = first_piece_record(view, seqlens, max_pages_per_seq, part);
  return plan;
}

}  // namespace mla::kernels
