// The MLA decode plan: how (sequence, page range) work is split over the SMs.
//
// The decode grid is fixed by the shape alone (num_parts CTAs per kv head and row tile), so it can
// be captured in a CUDA graph; what varies per step is the plan, computed on the device from the
// device seqlens by launch_mla_decode_plan() and reused by every layer of the step.
//
// Two plans, both on one axis of cost units (pages of work), sequences laid end to end; part p
// owns units [p·C, (p+1)·C), and page j of sequence i sits at unit cost_begin[i] + page_offset + j,
// so every page belongs to exactly one part and a part boundary can split a sequence: its pieces
// are merged by log-sum-exp in the combine step.
//  - The balanced plan: a sequence of n pages costs n + kDecodeFixedCostPages units (page_offset =
//    kDecodeFixedCostPages: the fixed part pays for loading the queries and writing the output),
//    C = ceil(total / num_parts) (or a little more, see cost_per_part), and a part costs at most
//    C + kDecodeFixedCostPages. A part can hold pieces of several sequences.
//  - The sequence-aligned plan (when every sequence can have parts of its own and that is no
//    slower): C = T pages, the smallest with Σ ceil(n_i / T) ≤ num_parts, each sequence padded to
//    a multiple of T (page_offset = 0), so every part holds at most one piece of at most T pages:
//    no part changes sequence, and none pays the fixed overhead twice.
// Every function here is pure and shared by the device kernels and the host (tests, tools), so
// the plan the CPU tests check is the plan the GPU runs.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/kernels/host_device.h"

namespace mla::kernels {

inline constexpr int kPageSize = 64;                // tokens per cache page
inline constexpr int kHeadDimQK = 576;              // kv_lora_rank 512 + qk_rope_head_dim 64
inline constexpr int kHeadDimV = 512;               // kv_lora_rank
inline constexpr int kDecodeFixedCostPages = 5;     // per-piece overhead, in pages of work
inline constexpr int kDecodeNoSplitSlackPages = 4;  // cost_per_part: a whole-sequence share's limit
// [cost_per_part, total_splits, batch, num_parts, page_offset]
inline constexpr int kDecodePlanHeaderInts = 5;

// The grid of the decode kernel, a function of the shape alone.
struct DecodeLaunchShape {
  int rows_per_kv_head = 0;  // s_q · h_q / h_kv: query rows that share one latent head
  int rows_per_tile = 0;     // 16, 32 or 64 rows per CTA (the smallest that fits, else 64)
  int num_row_tiles = 0;     // ceil(rows_per_kv_head / rows_per_tile)
  int num_parts = 0;         // split-KV partitions (CTAs) per kv head and row tile
};

MLA_HOST_DEVICE DecodeLaunchShape decode_launch_shape(int seqlen_q, int num_heads_q,
                                                      int num_heads_kv, int num_sms) {
  DecodeLaunchShape shape;
  shape.rows_per_kv_head = seqlen_q * (num_heads_q / num_heads_kv);
  const int rows = shape.rows_per_kv_head;
  shape.rows_per_tile = rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
  shape.num_row_tiles = (rows + shape.rows_per_tile - 1) / shape.rows_per_tile;
  const int ctas_per_part = num_heads_kv * shape.num_row_tiles;
  shape.num_parts = num_sms / ctas_per_part > 1 ? num_sms / ctas_per_part : 1;
  return shape;
}

// CTAs of the split-KV grid: num_parts per kv head and row tile.
MLA_HOST_DEVICE int64_t decode_grid_ctas(const DecodeLaunchShape& shape, int num_heads_kv) {
  return int64_t(shape.num_parts) * num_heads_kv * shape.num_row_tiles;
}

// Sequence length as the kernels use it: negative counts as 0, and nothing past the block table's
// capacity is ever read (a length beyond it is clamped, never trusted).
MLA_HOST_DEVICE int clamp_seqlen(int seqlen, int max_pages_per_seq) {
  const int capacity = max_pages_per_seq * kPageSize;
  return seqlen < 0 ? 0 : seqlen > capacity ? capacity : seqlen;
}

MLA_HOST_DEVICE int num_pages_of(int seqlen) {
  return (seqlen + kPageSize - 1) / kPageSize;
}

// A sequence's cost in the balanced plan.
MLA_HOST_DEVICE int seq_cost(int num_pages) {
  return num_pages > 0 ? num_pages + kDecodeFixedCostPages : 0;
}

// Parts a sequence of num_pages takes in the sequence-aligned plan with pages_per_part = T.
MLA_HOST_DEVICE int aligned_parts_of(int num_pages, int pages_per_part) {
  return (num_pages + pages_per_part - 1) / pages_per_part;
}

// A sequence's cost in the sequence-aligned plan: its pages padded to whole parts.
MLA_HOST_DEVICE int aligned_seq_cost(int num_pages, int pages_per_part) {
  return aligned_parts_of(num_pages, pages_per_part) * pages_per_part;
}

// The sequence-aligned plan is taken when its pages per part T is at most the balanced plan's C:
// the balanced plan's busiest parts hold C pages (a part inside one sequence) or C - fixed pages
// in two pieces, so T ≤ C is never more pages on a part, and its parts never change sequence.
// parts_needed(T) = Σ aligned_parts_of(n_i, T) over the batch; candidates T run from
// ceil(total_pages / num_parts) up, and the first with parts_needed(T) ≤ num_parts (and, where
// aligned_pieces_capped(), ≤ the balanced plan's pieces) wins.
// Tiles of more than 16 rows write four times the partial bytes a piece (64 rows of 2 KB fp32)
// and read a 72 KB query tile: for them the sequence-aligned plan may not make more pieces than
// the balanced plan (measured: one-page pieces at b = 8, 1024 were 5-8 % slower than two-page ones,
// while the 16-row body gained from them).
MLA_HOST_DEVICE bool aligned_pieces_capped(int rows_per_tile) {
  return rows_per_tile > 16;
}
// Candidates tried: T_lo .. min(C, T_lo + kDecodeAlignedCandidates - 1). With at most num_parts
// sequences with pages (the plan is only tried then), C - T_lo is at most
// ceil(5 · those sequences / num_parts) + 1 plus the whole-sequence rule's slack (≤ 10), so the
// limit only keeps the device plan's per-candidate counters bounded.
inline constexpr int kDecodeAlignedCandidates = 16;
MLA_HOST_DEVICE int aligned_first_candidate(int64_t total_pages, int num_parts) {
  const int64_t lower = (total_pages + num_parts - 1) / num_parts;
  return lower > 1 ? static_cast<int>(lower) : 1;
}
MLA_HOST_DEVICE int aligned_last_candidate(int first_candidate, int balanced_share) {
  const int last = first_candidate + kDecodeAlignedCandidates - 1;
  return last < balanced_share ? last : balanced_share;
}

// Whether the sequence-aligned plan is tried at all: allowed (MlaDecodePlanParams), no minimum
// cost per part asked for, and every one of the busy sequences (those with pages) can have a part.
MLA_HOST_DEVICE bool aligned_plan_tried(bool allowed, int min_cost_per_part, int64_t busy_seqs,
                                        int num_parts) {
  return allowed && min_cost_per_part <= 1 && busy_seqs > 0 && busy_seqs <= num_parts;
}

// Whether a candidate T whose pieces need parts_needed parts fits (max_pieces: the balanced plan's
// pieces where aligned_pieces_capped(), else 0 for no cap).
MLA_HOST_DEVICE bool aligned_candidate_fits(int64_t parts_needed, int num_parts,
                                            int64_t max_pieces) {
  return parts_needed <= num_parts && (max_pieces == 0 || parts_needed <= max_pieces);
}

// Balanced share: ceil(total / num_parts), at least 1 and at least min_cost_per_part (a larger C
// makes fewer, longer pieces and leaves the last parts empty; 0 keeps the balanced plan).
MLA_HOST_DEVICE int balanced_cost_per_part(int total_cost, int num_parts,
                                           int min_cost_per_part = 0) {
  const int per_part = (total_cost + num_parts - 1) / num_parts;
  const int lowest = min_cost_per_part > 1 ? min_cost_per_part : 1;
  return per_part > lowest ? per_part : lowest;
}

// C: the balanced share, or the smallest multiple of the costliest sequence's cost at or above it
// when that is at most kDecodeNoSplitSlackPages more. With equal lengths that multiple puts whole
// sequences in every part, so nothing splits and the combine has nothing to merge (b = 128 at
// 4k on 132 SMs: C = 69 instead of 67); a part still costs at most C + kDecodeFixedCostPages.
MLA_HOST_DEVICE int cost_per_part(int total_cost, int num_parts, int min_cost_per_part = 0,
                                  int max_seq_cost = 0) {
  const int balanced = balanced_cost_per_part(total_cost, num_parts, min_cost_per_part);
  if (max_seq_cost <= 0) return balanced;
  const int whole = (balanced + max_seq_cost - 1) / max_seq_cost * max_seq_cost;
  return whole <= balanced + kDecodeNoSplitSlackPages ? whole : balanced;
}

// Cost unit of page 0 of a sequence that starts at cost_begin (page_offset: the plan's units
// before a sequence's first page, kDecodeFixedCostPages or 0).
MLA_HOST_DEVICE int first_page_unit(int cost_begin, int page_offset) {
  return cost_begin + page_offset;
}

// Number of pieces (parts touching it) of a sequence.
MLA_HOST_DEVICE int num_splits_of(int cost_begin, int num_pages, int per_part, int page_offset) {
  if (num_pages == 0) return 0;
  const int first = first_page_unit(cost_begin, page_offset);
  return (first + num_pages - 1) / per_part - first / per_part + 1;
}

// A part's first piece, precomputed by the plan so a decode CTA learns where to start with one
// 32-byte load instead of a chain of dependent ones (plan header → part_first_seq → cost_begin and
// seqlens → split_begin): at small batches that chain was most of the time before the first page
// could be requested. seq = -1: the part has no work.
struct alignas(16) DecodePartRecord {
  int32_t seq = -1;
  int32_t seqlen = 0;  // clamped
  int32_t page_begin = 0;
  int32_t page_end = 0;
  int32_t split_index = 0;
  int32_t num_splits = 0;
  int32_t cost_per_part = 0;  // the plan's C, so the part's later pieces need no header load
  int32_t page_offset = 0;    // the plan's page_offset (for checks: the cursor reads the header's)
};
inline constexpr int kDecodePartRecordInts = 8;
static_assert(sizeof(DecodePartRecord) == kDecodePartRecordInts * sizeof(int32_t));

// Sizes of the plan arrays, in int32, laid out one after another:
// header[kDecodePlanHeaderInts], cost_begin[batch + 1], split_begin[batch + 1],
// part_first_seq[num_parts], then (from a multiple of 8 ints, so 32-byte aligned when the plan is)
// part_records[num_parts] of kDecodePartRecordInts.
MLA_HOST_DEVICE int64_t decode_part_records_offset(int batch, int num_parts) {
  const int64_t ints = kDecodePlanHeaderInts + 2 * (int64_t(batch) + 1) + num_parts;
  return (ints + kDecodePartRecordInts - 1) / kDecodePartRecordInts * kDecodePartRecordInts;
}
MLA_HOST_DEVICE int64_t decode_plan_ints(int batch, int num_parts) {
  return decode_part_records_offset(batch, num_parts) + int64_t(kDecodePartRecordInts) * num_parts;
}

// The plan kernel works on the plan's front (header to part_first_seq) and the clamped lengths in
// shared memory when both fit in kDecodePlanStagedMaxBytes (under the 48 KB a launch gets without
// opting in): batches up to about 3,300 sequences. Larger ones work on the plan in global memory;
// the two make the same plan.
inline constexpr int64_t kDecodePlanStagedMaxBytes = 40 * 1024;
MLA_HOST_DEVICE int64_t decode_plan_staged_ints(int batch, int num_parts) {
  return decode_part_records_offset(batch, num_parts) + batch;
}
MLA_HOST_DEVICE bool decode_plan_staged(int batch, int num_parts) {
  return decode_plan_staged_ints(batch, num_parts) * int64_t(sizeof(int32_t)) <=
         kDecodePlanStagedMaxBytes;
}

// A view of a plan in memory (device or host), over one int32 array of decode_plan_ints() values.
struct DecodePlanView {
  const int32_t* data = nullptr;
  int batch = 0;
  int num_parts = 0;

  MLA_HOST_DEVICE int cost_per_part() const { return data[0]; }
  MLA_HOST_DEVICE int total_splits() const { return data[1]; }
  MLA_HOST_DEVICE int page_offset() const { return data[4]; }
  MLA_HOST_DEVICE bool sequence_aligned() const { return page_offset() == 0; }
  MLA_HOST_DEVICE const int32_t* cost_begin() const { return data + kDecodePlanHeaderInts; }
  MLA_HOST_DEVICE const int32_t* split_begin() const { return cost_begin() + batch + 1; }
  MLA_HOST_DEVICE const int32_t* part_first_seq() const { return split_begin() + batch + 1; }
  MLA_HOST_DEVICE int num_splits(int seq) const {
    return split_begin()[seq + 1] - split_begin()[seq];
  }
  MLA_HOST_DEVICE const DecodePartRecord* part_records() const {
    return reinterpret_cast<const DecodePartRecord*>(data +
                                                     decode_part_records_offset(batch, num_parts));
  }
};

// One piece of work of a part: pages [page_begin, page_end) of sequence `seq`.
struct DecodePiece {
  int seq = 0;
  int seqlen = 0;  // clamped
  int page_begin = 0;
  int page_end = 0;
  int split_index = 0;  // global index of this piece's partial result
  int num_splits = 0;   // pieces of this sequence; 1 means the piece writes the final output
};

// A part's record, on the device as two 16-byte loads in flight at once (records are 32-byte
// aligned).
MLA_HOST_DEVICE DecodePartRecord load_part_record(const DecodePartRecord* record) {
#if defined(__CUDA_ARCH__)
  DecodePartRecord result;
  reinterpret_cast<int4*>(&result)[0] = reinterpret_cast<const int4*>(record)[0];
  reinterpret_cast<int4*>(&result)[1] = reinterpret_cast<const int4*>(record)[1];
  return result;
#else
  return *record;
#endif
}

// Walks the pieces of part `part` in order: first(), then next() until it returns false. Used by
// the decode kernels and by the CPU tests. The first piece comes from the part's record (one
// load); the later ones are found by scanning the cost prefix from the sequence after it.
// scanning() walks every piece by the scan from part_first_seq (next() only): the plan builders use
// it to fill the records.
class PartPieceCursor {
 public:
  MLA_HOST_DEVICE PartPieceCursor(const DecodePlanView& plan, const int32_t* seqlens,
                                  int max_pages_per_seq, int part)
      : plan_(plan), seqlens_(seqlens), max_pages_per_seq_(max_pages_per_seq), part_(part) {}

  MLA_HOST_DEVICE static PartPieceCursor scanning(const DecodePlanView& plan,
                                                  const int32_t* seqlens, int max_pages_per_seq,
                                                  int part) {
    PartPieceCursor cursor(plan, seqlens, max_pages_per_seq, part);
    cursor.start_scan(plan.cost_per_part(), plan.part_first_seq()[part]);
    return cursor;
  }

  // The part's first piece, from its record; false if the part has no work. Call once, first.
  MLA_HOST_DEVICE bool first(DecodePiece* piece) {
    const DecodePartRecord record = load_part_record(plan_.part_records() + part_);
    if (record.seq < 0) {
      start_scan(1, plan_.batch);  // nothing here, nothing after
      return false;
    }
    start_scan(record.cost_per_part, record.seq + 1);
    *piece = {record.seq,      record.seqlen,      record.page_begin,
              record.page_end, record.split_index, record.num_splits};
    return true;
  }

  // The next piece, after first() (or from the start, for a scanning() cursor).
  MLA_HOST_DEVICE bool next(DecodePiece* piece) {
    const int32_t* cost_begin = plan_.cost_begin();
    // From the header, not held across the kernel (a register more spilled the 16-row body); its
    // load goes out beside the first cost_begin load, so the scan waits no longer.
    const int page_offset = plan_.page_offset();
    const int unit_begin = part_ * per_part_;
    const int unit_end = unit_begin + per_part_;
    for (; seq_ < plan_.batch && cost_begin[seq_] < unit_end; ++seq_) {
      const int seqlen = clamp_seqlen(seqlens_[seq_], max_pages_per_seq_);
      const int num_pages = num_pages_of(seqlen);
      const int first = first_page_unit(cost_begin[seq_], page_offset);
      const int begin = clamp_index(unit_begin - first, num_pages);
      const int end = clamp_index(unit_end - first, num_pages);
      if (begin >= end) continue;
      piece->seq = seq_;
      piece->seqlen = seqlen;
      piece->page_begin = begin;
      piece->page_end = end;
      piece->split_index = plan_.split_begin()[seq_] + part_ - first / per_part_;
      piece->num_splits = plan_.num_splits(seq_);
      ++seq_;
      return true;
    }
    return false;
  }

 private:
  MLA_HOST_DEVICE static int clamp_index(int value, int upper) {
    return value < 0 ? 0 : value > upper ? upper : value;
  }
  MLA_HOST_DEVICE void start_scan(int per_part, int seq) {
    per_part_ = per_part > 0 ? per_part : 1;
    seq_ = seq;
  }
  DecodePlanView plan_;
  const int32_t* seqlens_;
  int max_pages_per_seq_;
  int part_;
  int per_part_ = 1;  // the plan's C (from the record, or the header when scanning())
  int seq_ = 0;       // the next sequence the scan looks at
};

// A part's record: its first piece (none: seq = -1), its C and page_offset.
MLA_HOST_DEVICE DecodePartRecord part_record(const DecodePiece* first_piece, int cost_per_part,
                                             int page_offset) {
  DecodePartRecord record;
  record.cost_per_part = cost_per_part;
  record.page_offset = page_offset;
  if (first_piece == nullptr) return record;
  record.seq = first_piece->seq;
  record.seqlen = first_piece->seqlen;
  record.page_begin = first_piece->page_begin;
  record.page_end = first_piece->page_end;
  record.split_index = first_piece->split_index;
  record.num_splits = first_piece->num_splits;
  return record;
}

// The first piece of part `part` as its record (what the plan builders store).
MLA_HOST_DEVICE DecodePartRecord first_piece_record(const DecodePlanView& plan,
                                                    const int32_t* seqlens, int max_pages_per_seq,
                                                    int part) {
  PartPieceCursor cursor = PartPieceCursor::scanning(plan, seqlens, max_pages_per_seq, part);
  DecodePiece piece;
  const bool has_work = cursor.next(&piece);
  return part_record(has_work ? &piece : nullptr, plan.cost_per_part(), plan.page_offset());
}

// The pages of one part in the order the CTA consumes them, pieces one after another (thread 0's
// look-ahead for the decode kernels' page pipeline; the CPU tests check it against the pieces).
// Made from a cursor that has just returned the part's first piece (has_first: the part has one).
struct PartPageStream {
  PartPieceCursor cursor;
  int seq = 0;
  int page = 0;      // the next page of the current piece
  int page_end = 0;  // the current piece's end (0: none)

  MLA_HOST_DEVICE PartPageStream(const PartPieceCursor& after_first, bool has_first,
                                 const DecodePiece& first_piece)
      : cursor(after_first) {
    if (has_first) {
      seq = first_piece.seq;
      page = first_piece.page_begin;
      page_end = first_piece.page_end;
    }
  }

  MLA_HOST_DEVICE bool next(int* next_seq, int* next_page) {
    if (page >= page_end) {
      DecodePiece piece;
      if (!cursor.next(&piece)) return false;
      seq = piece.seq;
      page = piece.page_begin;
      page_end = piece.page_end;
    }
    *next_seq = seq;
    *next_page = page++;
    return true;
  }
};

// The plan computed on the host: the same int32 array launch_mla_decode_plan() writes on the
// device (the GPU tests compare the two word for word). Pure; used by tests and tools.
// sequence_aligned: false never makes the sequence-aligned plan (nor does a min_cost_per_part > 1);
// rows_per_tile: the launch shape's (aligned_pieces_capped()).
std::vector<int32_t> make_decode_plan_host(const int32_t* seqlens, int batch, int num_parts,
                                           int max_pages_per_seq, int min_cost_per_part = 0,
                                           bool sequence_aligned = true, int rows_per_tile = 16);

}  // namespace mla::kernels
