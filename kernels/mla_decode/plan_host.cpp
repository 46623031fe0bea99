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

std::vector<int32_t> make_decode_weighted_plan_host(const int32_t* seqlens, int batch,
                                                    const int32_t* weights, int num_parts,
                                                    int max_pages_per_seq) {
  std::vector<int32_t> plan(decode_plan_ints(batch, num_parts), 0);
  int32_t* cost_begin = plan.data() + kDecodePlanHeaderInts;
  int32_t* split_begin = cost_begin + batch + 1;
  int32_t* part_first_seq = split_begin + batch + 1;
  const std::vector<int> pages = fill_cost_begin(seqlens, batch, max_pages_per_seq, cost_begin);
  const int total_cost = cost_begin[batch];
  // The weights' prefix (part_share_weight(); none positive: all weigh 1), then the
  // parts' first units and one past the last part.
  bool any_positive = false;
  for (int part = 0; part < num_parts; ++part) any_positive = any_positive || weights[part] > 0;
  std::vector<int64_t> weight_prefix(num_parts + 1, 0);
  for (int part = 0; part < num_parts; ++part)
    weight_prefix[part + 1] =
        weight_prefix[part] + (any_positive ? part_share_weight(weights[part]) : 1);
  std::vector<int32_t> unit_begin(num_parts + 1, total_cost);
  for (int part = 0; part < num_parts; ++part)
    unit_begin[part] =
        weighted_unit_begin(total_cost, weight_prefix[part], weight_prefix[num_parts]);
  int largest = 0;
  for (int part = 0; part < num_parts; ++part)
    largest = std::max(largest, unit_begin[part + 1] - unit_begin[part]);
  // Parts of no units (a weight of 0, or rounding) hold no piece: a sequence's pieces are counted,
  // and its split indices numbered, over the parts with units only.
  std::vector<int> units_parts_before(num_parts + 1, 0);
  for (int part = 0; part < num_parts; ++part)
    units_parts_before[part + 1] =
        units_parts_before[part] + (unit_begin[part + 1] > unit_begin[part] ? 1 : 0);
  auto rank_of_unit = [&](int unit) {
    return units_parts_before[weighted_part_of_unit(unit_begin.data(), num_parts, unit)];
  };
  for (int seq = 0; seq < batch; ++seq) {
    int splits = 0;
    if (pages[seq] > 0) {
      const int first = first_page_unit(cost_begin[seq]);
      splits = rank_of_unit(first + pages[seq] - 1) - rank_of_unit(first) + 1;
    }
    split_begin[seq + 1] = split_begin[seq] + splits;
  }
  for (int part = 0; part < num_parts; ++part)
    part_first_seq[part] = first_seq_after(cost_begin, batch, unit_begin[part]);
  DecodePartRecord* records = write_header(plan, largest, split_begin[batch], batch, num_parts);
  const DecodePlanView view{plan.data(), batch, num_parts};
  for (int part = 0; part < num_parts; ++part) {
    int seq = part_first_seq[part];
    int first = 0;
    DecodePiece piece;
    const bool has_work = next_piece_in_units(view, seqlens, max_pages_per_seq, unit_begin[part],
                                              unit_begin[part + 1], &seq, &piece, &first);
    if (has_work)
      piece.split_index = split_begin[piece.seq] + units_parts_before[part] - rank_of_unit(first);
    records[part] = part_record(has_work ? &piece : nullptr,
                                unit_begin[part + 1] - unit_begin[part], unit_begin[part]);
  }
  return plan;
}

std::vector<int32_t> make_decode_sm_part_table_host(const int32_t* sm_weights, int num_parts,
                                                    std::vector<int32_t>* part_weights) {
  int num_weighted = 0;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot) num_weighted += sm_weights[slot] > 0 ? 1 : 0;
  std::vector<int32_t> table(kDecodeSmSlots, -1);
  part_weights->assign(num_parts, 0);
  int weighted_before = 0, unweighted_before = 0;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot) {
    const bool weighted = sm_weights[slot] > 0;
    table[slot] =
        decode_sm_slot_part(weighted, weighted_before, unweighted_before, num_weighted, num_parts);
    if (table[slot] >= 0) (*part_weights)[table[slot]] = weighted ? sm_weights[slot] : 0;
    (weighted ? weighted_before : unweighted_before) += 1;
  }
  return table;
}

std::vector<int32_t> make_decode_sm_ranked_table_host(const int32_t* sm_weights, int num_parts) {
  int num_weighted = 0;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot) num_weighted += sm_weights[slot] > 0 ? 1 : 0;
  std::vector<int32_t> table(kDecodeSmSlots, -1);
  int unweighted_before = 0;
  for (int slot = 0; slot < kDecodeSmSlots; ++slot) {
    const bool weighted = sm_weights[slot] > 0;
    table[slot] =
        decode_sm_slot_part(weighted, weighted ? decode_sm_weight_rank(sm_weights, slot) : 0,
                            unweighted_before, num_weighted, num_parts);
    if (!weighted) ++unweighted_before;
  }
  return table;
}

std::vector<int32_t> make_decode_sm_balanced_plan_host(const int32_t* seqlens, int batch,
                                                       const int32_t* sm_weights, int num_parts,
                                                       int max_pages_per_seq,
                                                       std::vector<int32_t>* part_of_slot) {
  std::vector<int32_t> part_weights;
  *part_of_slot = make_decode_sm_part_table_host(sm_weights, num_parts, &part_weights);
  return make_decode_weighted_plan_host(seqlens, batch, part_weights.data(), num_parts,
                                        max_pages_per_seq);
}

}  // namespace mla::kernels
