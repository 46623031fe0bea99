// The decode plan kernel (one CTA computes the whole plan from the device seqlens, and zeroes
// kFast's combine counters) and the combine kernels (merge a sequence's split-KV partial results by
// log-sum-exp) launched after the split-KV kernel (kFast's fused combine merges inside it instead:
// fused_combine.cuh).
#include <cub/block/block_scan.cuh>

#include <cmath>

#include "common/launch.cuh"
#include "common/ptx.cuh"
#include "cuda/check.h"
#include "mla_decode/config.h"
#include "mla_decode/fused_combine.cuh"
#include "mla_decode/kernel_args.h"

namespace mla::kernels {
namespace decode {
namespace {

struct PlanKernelArgs {
  const int32_t* seqlens;     // [batch]
  int32_t* plan;              // [decode_plan_ints(batch, num_parts)]
  int32_t* combine_counters;  // [num_combine_counters]: set to 0 here, for kFast's fused combine
  int64_t num_combine_counters;
  int batch;
  int num_parts;
  int max_pages_per_seq;
  int min_cost_per_part;
  bool sequence_aligned;  // may make the sequence-aligned plan (mla_decode_plan.h)
  int rows_per_tile;      // the launch shape's (aligned_pieces_capped())
};

// Where the kernel's passes read and write: the plan's front (header, cost_begin, split_begin,
// part_first_seq, in the plan's layout) and the sequence lengths. Staged (decode_plan_staged()),
// both are in shared memory, the lengths already clamped, and the front is copied to the plan at
// the end: the seqlens are then read from global memory once, and no pass waits on a global load
// (the binary searches and the records' scans were chains of them). Otherwise they are the plan
// itself and the device seqlens.
struct PlanBuffers {
  int32_t* front;
  const int32_t* lengths;
  int batch;
  int max_pages_per_seq;

  __device__ __forceinline__ int pages(int seq) const {
    return num_pages_of(clamp_seqlen(lengths[seq], max_pages_per_seq));
  }
  __device__ __forceinline__ int32_t* cost_begin() const { return front + kDecodePlanHeaderInts; }
  __device__ __forceinline__ int32_t* split_begin() const { return cost_begin() + batch + 1; }
  __device__ __forceinline__ int32_t* part_first_seq() const { return split_begin() + batch + 1; }
};

using PlanScan = cub::BlockScan<int, kPlanThreads>;

// out[0..batch): the exclusive prefix over the sequences of value(sequence, its pages), chunk by
// chunk of kPlanThreads; returns the total. Every thread calls it; thread t handles sequences
// t, t + kPlanThreads, ... (later passes rely on it to read back what they wrote).
template <typename Value>
__device__ int write_prefix(const PlanBuffers& buffers, int32_t* out, Value value,
                            PlanScan::TempStorage& storage, int& carry) {
  const int tid = threadIdx.x;
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < buffers.batch; base += kPlanThreads) {
    const int seq = base + tid;
    const int own = seq < buffers.batch ? value(seq, buffers.pages(seq)) : 0;
    int prefix, chunk_total;
    PlanScan(storage).ExclusiveSum(own, prefix, chunk_total);
    if (seq < buffers.batch) out[seq] = carry + prefix;
    __syncthreads();
    if (tid == 0) carry += chunk_total;
    __syncthreads();
  }
  const int total = carry;
  __syncthreads();
  return total;
}

__device__ __forceinline__ long long warp_sum(long long value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(~0u, value, offset);
  return value;  // in lane 0
}

// Block-wide sums of per-thread values, into shared counters (zeroed by the caller, and a barrier
// since); every thread gets them after the barrier here.
template <int kCount>
__device__ void block_sums(long long (&own)[kCount], unsigned long long (&totals)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const long long sum = warp_sum(own[i]);
    if ((threadIdx.x & 31) == 0 && sum != 0)
      atomicAdd(&totals[i], static_cast<unsigned long long>(sum));
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kCount; ++i) own[i] = static_cast<long long>(totals[i]);
}

// The sequence-aligned plan's T, or 0 when it is not taken (the host's aligned_pages_per_part(),
// with the same tests from mla_decode_plan.h), from the totals of the cost pass: one pass over the
// sequences counts, per warp into shared counters, the parts every candidate T needs and (where
// aligned_pieces_capped()) the balanced plan's pieces. Every thread calls it; every thread gets
// the result.
__device__ int aligned_pages_per_part(const PlanKernelArgs& args, const PlanBuffers& buffers,
                                      long long total_pages, long long busy_seqs,
                                      int balanced_share) {
  __shared__ unsigned long long balanced_pieces[1];
  __shared__ int needed[kDecodeAlignedCandidates];
  if (!aligned_plan_tried(args.sequence_aligned, args.min_cost_per_part, busy_seqs, args.num_parts))
    return 0;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  if (tid == 0) balanced_pieces[0] = 0;
  if (tid < kDecodeAlignedCandidates) needed[tid] = 0;
  __syncthreads();
  const bool capped = aligned_pieces_capped(args.rows_per_tile);
  const int first = aligned_first_candidate(total_pages, args.num_parts);
  const int last = aligned_last_candidate(first, balanced_share);
  const int32_t* cost_begin = buffers.cost_begin();
  long long pieces[1] = {0};
  for (int base = 0; base < args.batch; base += kPlanThreads) {  // the same trip count per warp
    const int seq = base + tid;
    const int pages = seq < args.batch ? buffers.pages(seq) : 0;
    if (capped && pages > 0)
      pieces[0] += num_splits_of(cost_begin[seq], pages, balanced_share, kDecodeFixedCostPages);
    for (int t = first; t <= last; ++t) {
      const int parts = __reduce_add_sync(~0u, static_cast<unsigned>(aligned_parts_of(pages, t)));
      if (lane == 0 && parts != 0) atomicAdd(&needed[t - first], parts);
    }
  }
  block_sums(pieces, balanced_pieces);
  const long long max_pieces = capped ? pieces[0] : 0;
  for (int t = first; t <= last; ++t) {
    if (aligned_candidate_fits(needed[t - first], args.num_parts, max_pieces)) return t;
  }
  return 0;
}

// Same arithmetic as make_decode_plan_host(), with block-wide scans in place of the loops.
__global__ void __launch_bounds__(kPlanThreads)
    mla_decode_plan_kernel(const __grid_constant__ PlanKernelArgs args) {
  extern __shared__ int32_t staged[];  // decode_plan_staged_ints() when decode_plan_staged()
  __shared__ PlanScan::TempStorage storage;
  __shared__ int carry;
  __shared__ int max_seq_cost;
  __shared__ unsigned long long totals[2];
  const int tid = threadIdx.x;
  const bool is_staged = decode_plan_staged(args.batch, args.num_parts);
  const int64_t front_ints = decode_part_records_offset(args.batch, args.num_parts);
  const PlanBuffers buffers{is_staged ? staged : args.plan,
                            is_staged ? staged + front_ints : args.seqlens, args.batch,
                            args.max_pages_per_seq};
  int32_t* const header = buffers.front;
  int32_t* const cost_begin = buffers.cost_begin();
  int32_t* const split_begin = buffers.split_begin();
  int32_t* const part_first_seq = buffers.part_first_seq();

  // kFast's arrival counters start every step at 0 (each fused launch then adds a sequence's number
  // of pieces to its counter).
  for (int64_t i = tid; i < args.num_combine_counters; i += kPlanThreads)
    args.combine_counters[i] = 0;
  if (is_staged) {
    for (int seq = tid; seq < args.batch; seq += kPlanThreads)
      staged[front_ints + seq] = clamp_seqlen(args.seqlens[seq], args.max_pages_per_seq);
  }
  if (tid < 2) totals[tid] = 0;
  if (tid == 0) max_seq_cost = 0;

  // Pass 1: the balanced plan's cost prefix, with the total pages, the sequences with pages and the
  // costliest sequence, then C. (write_prefix's barriers order the stores above before the pass,
  // and the maxima before the read.)
  long long pass_totals[2] = {0, 0};  // pages, busy sequences
  int* const costliest = &max_seq_cost;
  const int total_cost = write_prefix(
      buffers, cost_begin,
      [costliest, &pass_totals](int, int pages) {
        const int cost = seq_cost(pages);
        if (cost > 0) atomicMax(costliest, cost);
        pass_totals[0] += pages;
        pass_totals[1] += pages > 0 ? 1 : 0;
        return cost;
      },
      storage, carry);
  block_sums(pass_totals, totals);
  const int balanced =
      cost_per_part(total_cost, args.num_parts, args.min_cost_per_part, max_seq_cost);

  // The sequence-aligned plan's T, when it is taken.
  const int aligned =
      aligned_pages_per_part(args, buffers, pass_totals[0], pass_totals[1], balanced);
  const int per_part = aligned > 0 ? aligned : balanced;
  const int page_offset = aligned > 0 ? 0 : kDecodeFixedCostPages;

  // Pass 2: exclusive prefix of splits per sequence. In the sequence-aligned plan a sequence's
  // splits are its parts, ceil(n / T), and its cost those parts' pages, so the same pass gives the
  // cost prefix: T times the splits'.
  int total_splits;
  int final_cost = total_cost;
  if (aligned > 0) {
    total_splits = write_prefix(
        buffers, split_begin,
        [aligned](int, int pages) { return aligned_parts_of(pages, aligned); }, storage, carry);
    for (int seq = tid; seq < args.batch; seq += kPlanThreads)  // what this thread wrote
      cost_begin[seq] = aligned * split_begin[seq];
    final_cost = aligned * total_splits;
  } else {
    total_splits = write_prefix(
        buffers, split_begin,
        [cost_begin, per_part](int seq, int pages) {
          return num_splits_of(cost_begin[seq], pages, per_part, kDecodeFixedCostPages);
        },
        storage, carry);
  }
  if (tid == 0) {
    header[0] = per_part;
    header[1] = total_splits;
    header[2] = args.batch;
    header[3] = args.num_parts;
    header[4] = page_offset;
    cost_begin[args.batch] = final_cost;
    split_begin[args.batch] = total_splits;
  }
  __syncthreads();

  // Pass 3: the first sequence each part touches (binary search over the cost prefix).
  for (int part = tid; part < args.num_parts; part += kPlanThreads) {
    const int unit = part * per_part;
    int lo = 0, hi = args.batch;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (cost_begin[mid + 1] > unit)
        hi = mid;
      else
        lo = mid + 1;
    }
    part_first_seq[part] = lo;
  }
  __syncthreads();

  // Pass 4: each part's first piece, so a decode CTA starts from one load (DecodePartRecord), and
  // the staged front copied out.
  const DecodePlanView view{buffers.front, args.batch, args.num_parts};
  auto* records = reinterpret_cast<DecodePartRecord*>(args.plan + front_ints);
  for (int part = tid; part < args.num_parts; part += kPlanThreads)
    records[part] = first_piece_record(view, buffers.lengths, args.max_pages_per_seq, part);
  // The padding before the records is 0, as on the host (the plans compare word for word).
  const int64_t padding_begin = part_first_seq + args.num_parts - header;
  if (is_staged) {
    for (int64_t i = tid; i < padding_begin; i += kPlanThreads) args.plan[i] = staged[i];
  }
  for (int64_t i = padding_begin + tid; i < front_ints; i += kPlanThreads) args.plan[i] = 0;
}

// The largest of value(k) for k in [0, count), over a warp (lanes stride over k); -inf if none.
template <typename Value>
__device__ __forceinline__ float warp_max(int count, int lane, const Value& value) {
  float result = -INFINITY;
  for (int k = lane; k < count; k += 32) result = fmaxf(result, value(k));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    result = fmaxf(result, __shfl_xor_sync(0xffffffffu, result, offset));
  return result;
}

// kTimeline: thread 0 stamps this CTA's combine timeline slot `slot` (%globaltimer).
template <bool kTimeline>
__device__ __forceinline__ void combine_stamp(const DecodeKernelArgs& args, int slot) {
  if constexpr (kTimeline) {
    ptx::st_global_u64_if(
        threadIdx.x == 0,
        args.combine_timeline +
            (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * kDecodeCombineTimelineSlots + slot,
        ptx::global_timer_ns());
  }
}

// One warp merges row `row_index` (kv head · rows per kv head + r) of sequence `batch_index`, whose
// num_splits (not 1) partials start at split0: merged by their log-sum-exp; with none (seqlen 0)
// out = 0, lse = +inf.
__device__ __forceinline__ void merge_row(const DecodeKernelArgs& args, int batch_index,
                                          int row_index, int num_splits, int split0, int lane) {
  constexpr int kColsPerLanePass = 4;                       // one float4
  constexpr int kPasses = kDimV / (32 * kColsPerLanePass);  // 4
  const MlaDecodeParams& p = args.params;
  const int rows_total = args.shape.rows_per_kv_head;
  const int kv_head = row_index / rows_total;
  const int r = row_index % rows_total;
  const auto [s, head] = query_row(args, kv_head, r);
  auto* out_row = reinterpret_cast<__nv_bfloat16*>(p.out) + batch_index * p.out_batch_stride +
                  s * p.out_seq_stride + head * p.out_head_stride;
  float* lse_out =
      p.lse + (static_cast<int64_t>(batch_index) * p.num_heads_q + head) * p.seqlen_q + s;

  auto partial_index = [&](int k) {
    return (static_cast<int64_t>(split0 + k) * p.num_heads_kv + kv_head) * rows_total + r;
  };

  const float max_lse =
      warp_max(num_splits, lane, [&](int k) { return args.partial_lse[partial_index(k)]; });

  float acc[kPasses][kColsPerLanePass] = {};
  float lse_final = INFINITY;  // no key seen anywhere: out = 0, lse = +inf
  if (max_lse != -INFINITY) {
    float sum = 0.f;
    for (int k = lane; k < num_splits; k += 32)
      sum += expf(args.partial_lse[partial_index(k)] - max_lse);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float inv_sum = 1.f / sum;
    lse_final = max_lse + logf(sum);
#pragma unroll 4
    for (int k = 0; k < num_splits; ++k) {
      const int64_t index = partial_index(k);
      const float weight = expf(args.partial_lse[index] - max_lse) * inv_sum;
      if (weight == 0.f) continue;  // an empty piece: its partial is 0 (and may be skipped)
      const float* partial = args.partial_out + index * kDimV;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const float4 v =
            *reinterpret_cast<const float4*>(partial + (pass * 32 + lane) * kColsPerLanePass);
        acc[pass][0] += weight * v.x;
        acc[pass][1] += weight * v.y;
        acc[pass][2] += weight * v.z;
        acc[pass][3] += weight * v.w;
      }
    }
  }
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc[pass][0], acc[pass][1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc[pass][2], acc[pass][3]);
    uint2 packed;
    packed.x = *reinterpret_cast<uint32_t*>(&lo);
    packed.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(out_row + (pass * 32 + lane) * kColsPerLanePass) = packed;
  }
  if (lane == 0) *lse_out = lse_final;
}

// One warp per (sequence, kv head, row). Sequences with one split were written by the split-KV
// kernel; the others are merged (merge_row). kTimeline: the diagnostic instantiation that stamps
// (combine_stamp).
template <bool kTimeline>
__global__ void __launch_bounds__(kCombineRowsPerBlock * 32)
    mla_decode_combine_kernel(const __grid_constant__ DecodeKernelArgs args) {
  combine_stamp<kTimeline>(args, 0);
  const MlaDecodeParams& p = args.params;
  const int lane = threadIdx.x & 31;
  const int row_index = blockIdx.x * kCombineRowsPerBlock + (threadIdx.x >> 5);
  if (row_index >= p.num_heads_kv * args.shape.rows_per_kv_head) return;
  const int batch_index = blockIdx.y;
  // The plan was written before the split-KV grid started, so it is read before waiting for it.
  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};
  const int num_splits = plan.num_splits(batch_index);
  const int split0 = plan.split_begin()[batch_index];
  // Before any return: the split-KV grid triggers its dependents at its start, so a combine that
  // finished without waiting could let the stream's next kernel overtake the split grid.
  ptx::wait_for_preceding_grid();  // when launched as a programmatic dependent (kFast)
  combine_stamp<kTimeline>(args, 1);
  if (num_splits == 1) {
    combine_stamp<kTimeline>(args, 2);
    return;
  }
  merge_row(args, batch_index, row_index, num_splits, split0, lane);
  combine_stamp<kTimeline>(args, 2);
}

// kFast's combine for batches that are not small: one wave of CTAs (kCombineOneWaveBlocksPerSm a
// SM, combine_grid()) whose warps stride over the rows of the sequences that need a merge (those
// not in one piece), instead of a CTA per 8 rows of every sequence. Each CTA lists those sequences
// from the plan, kCombineListChunk at a time (the first round before it waits for the split-KV
// grid, the others after); a warp then takes the list's rows w, w + warps, ... (rows of a sequence
// consecutive). With a CTA per 8 rows of every sequence the grid ran in several waves (four to
// eight at b = 128, h_q = 128), most of whose CTAs only waited and returned, and the split
// sequences' rows waited for the waves before them.
template <bool kTimeline>
__global__ void __launch_bounds__(kCombineRowsPerBlock * 32, kCombineOneWaveBlocksPerSm)
    mla_decode_combine_one_wave_kernel(const __grid_constant__ DecodeKernelArgs args) {
  combine_stamp<kTimeline>(args, 0);
  constexpr int kBlockThreads = kCombineRowsPerBlock * 32;
  using BlockScan = cub::BlockScan<int, kBlockThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ int listed[kCombineListChunk];
  const MlaDecodeParams& p = args.params;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * kCombineRowsPerBlock;
  const int64_t warp = int64_t(blockIdx.x) * kCombineRowsPerBlock + (threadIdx.x >> 5);
  const int rows_in_seq = p.num_heads_kv * args.shape.rows_per_kv_head;
  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};
  const int32_t* split_begin = plan.split_begin();
  bool waited = false;
  for (int chunk0 = 0; chunk0 < p.batch || !waited; chunk0 += kCombineListChunk) {
    // This chunk's sequences to merge, in order (the plan precedes the split-KV grid).
    const int chunk_end = min(p.batch, chunk0 + kCombineListChunk);
    int count = 0;
    for (int base = chunk0; base < chunk_end; base += kBlockThreads) {
      const int seq = base + static_cast<int>(threadIdx.x);
      const int needs_merge = seq < chunk_end && plan.num_splits(seq) != 1 ? 1 : 0;
      int position, total;
      BlockScan(scan_storage).ExclusiveSum(needs_merge, position, total);
      if (needs_merge) listed[count + position] = seq;
      count += total;
      __syncthreads();  // scan_storage is reused
    }
    if (!waited) {  // before any return (see mla_decode_combine_kernel)
      ptx::wait_for_preceding_grid();
      combine_stamp<kTimeline>(args, 1);
      waited = true;
    }
    for (int64_t item = warp; item < int64_t(count) * rows_in_seq; item += warps) {
      const int seq = listed[item / rows_in_seq];
      merge_row(args, seq, static_cast<int>(item % rows_in_seq), plan.num_splits(seq),
                split_begin[seq], lane);
    }
    __syncthreads();  // every warp is done with the list before the next chunk's
  }
  combine_stamp<kTimeline>(args, 2);
}

// kFast's combine for small batches, sliced: one CTA of 256 threads per (sequence, kv head, row,
// slice of 512 / kSlices output columns). Its threads form teams of 8-column groups (a team spans
// the slice) and the teams stride over the splits, kSliceSplitsPerThread loads in flight per thread
// (all issued before the first is used); the row's largest lse is found by the whole CTA first
// (from the first round's loads), so each split's weight is final when it is added. The
// teams' sums meet in shared memory. kSlices (1, 2, 4 or 8) is picked on the host so that the grid
// has about one CTA per SM (sliced_combine_slices()). kPerThread: kSliceSplitsPerThread (118
// registers, kSlicedCombineCtasPerSm = two CTAs an SM), or kSliceSplitsPerThreadLight for grids of
// more CTAs than that (sliced_combine_light()): 64 registers, four an SM, more rounds for sequences
// of many pieces.
template <int kSlices, int kPerThread, bool kTimeline>
__global__ void __launch_bounds__(kThreads, kPerThread <= kSliceSplitsPerThreadLight
                                                ? kSlicedCombineLightCtasPerSm
                                                : 1)
    mla_decode_combine_sliced_kernel(const __grid_constant__ DecodeKernelArgs args) {
  combine_stamp<kTimeline>(args, 0);
  constexpr int kColumns = kDimV / kSlices;             // this CTA's output columns
  constexpr int kTeamWidth = kColumns / kMergeColumns;  // threads per split: 64 / kSlices
  constexpr int kTeams = kThreads / kTeamWidth;         // splits merged at once: 4 · kSlices
  __shared__ float team_columns[kTeams][kColumns];      // 8 KB: kTeams · kColumns = 2,048 floats
  __shared__ float team_sums[kTeams];
  __shared__ float warp_max_lse[kWarps];

  const MlaDecodeParams& p = args.params;
  const int tid = threadIdx.x;
  const int rows_total = args.shape.rows_per_kv_head;
  const int row_index = blockIdx.x / kSlices;  // kv head · rows_total + r
  const int slice = blockIdx.x % kSlices;
  const int batch_index = blockIdx.y;
  const DecodePlanView plan{args.plan, p.batch, args.shape.num_parts};  // see the per-row kernel
  const int num_splits = plan.num_splits(batch_index);
  const int split0 = plan.split_begin()[batch_index];
  ptx::wait_for_preceding_grid();  // before any return (see mla_decode_combine_kernel)
  combine_stamp<kTimeline>(args, 1);
  if (num_splits == 1) {  // the split-KV kernel wrote out and lse itself
    combine_stamp<kTimeline>(args, 2);
    return;
  }

  const int kv_head = row_index / rows_total;
  const int r = row_index % rows_total;
  const int64_t piece_stride = static_cast<int64_t>(p.num_heads_kv) * rows_total;
  const int64_t row0 =
      static_cast<int64_t>(split0) * piece_stride + static_cast<int64_t>(kv_head) * rows_total + r;
  const float* lse0 = args.partial_lse + row0;
  const int team = tid / kTeamWidth;
  const int column = slice * kColumns + (tid % kTeamWidth) * kMergeColumns;
  const float* out0 = args.partial_out + row0 * kDimV + column;

  // The first round's partials, issued before anything waits on a load.
  float lse[kPerThread];
  float4 lo[kPerThread], hi[kPerThread];
  auto load_round = [&](int base) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int k = base + team + kTeams * i;
      lse[i] = -INFINITY;
      if (k < num_splits) {
        const float4* partial = reinterpret_cast<const float4*>(out0 + k * piece_stride * kDimV);
        lo[i] = partial[0];
        hi[i] = partial[1];
        lse[i] = lse0[k * piece_stride];
      }
    }
  };
  load_round(0);

  // The row's largest lse over all splits, by the whole CTA: the first round's are in registers
  // (every split below kRound is some team's), the rest are loaded here.
  constexpr int kRound = kTeams * kPerThread;  // splits per round
  float max_lse = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) max_lse = fmaxf(max_lse, lse[i]);
  for (int k = kRound + tid; k < num_splits; k += kThreads)
    max_lse = fmaxf(max_lse, lse0[k * piece_stride]);
  max_lse = max_over_team(max_lse, 32);
  if ((tid & 31) == 0) warp_max_lse[tid >> 5] = max_lse;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) max_lse = fmaxf(max_lse, warp_max_lse[w]);

  // Σ_k exp(lse_k − max) · partial_k over this team's splits, under the final maximum (a split with
  // lse = -inf saw no key: its weight is 0 and its partial, maybe unwritten, is never read into the
  // sum). No split saw a key when the maximum is -inf: nothing is added.
  MergedColumns m;
  m.reset();
  if (max_lse != -INFINITY) {
    m.max = max_lse;
    for (int base = 0; base < num_splits; base += kRound) {
      if (base > 0) load_round(base);
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) m.add(lse[i], lo[i], hi[i]);
    }
  }
  const int team_column = (tid % kTeamWidth) * kMergeColumns;
#pragma unroll
  for (int c = 0; c < kMergeColumns; c += 4)
    *reinterpret_cast<float4*>(&team_columns[team][team_column + c]) =
        make_float4(m.acc[c], m.acc[c + 1], m.acc[c + 2], m.acc[c + 3]);
  if (tid % kTeamWidth == 0) team_sums[team] = m.sum;
  __syncthreads();

  // Every team's sums added; out = that / Σ weights (0 and lse = +inf when no split saw a key).
  float total = 0.f;
#pragma unroll
  for (int t = 0; t < kTeams; ++t) total += team_sums[t];
  const float inv_total = total > 0.f ? 1.f / total : 0.f;
  const auto [s, head] = query_row(args, kv_head, r);
  auto* out_row = reinterpret_cast<__nv_bfloat16*>(p.out) + batch_index * p.out_batch_stride +
                  s * p.out_seq_stride + head * p.out_head_stride + slice * kColumns;
  for (int c = 2 * tid; c < kColumns; c += 2 * kThreads) {
    float x0 = 0.f, x1 = 0.f;
#pragma unroll
    for (int t = 0; t < kTeams; ++t) {
      x0 += team_columns[t][c];
      x1 += team_columns[t][c + 1];
    }
    *reinterpret_cast<__nv_bfloat162*>(out_row + c) =
        __floats2bfloat162_rn(x0 * inv_total, x1 * inv_total);
  }
  if (slice == 0 && tid == 0) {
    p.lse[(static_cast<int64_t>(batch_index) * p.num_heads_q + head) * p.seqlen_q + s] =
        total > 0.f ? max_lse + logf(total) : INFINITY;
  }
  combine_stamp<kTimeline>(args, 2);
}

}  // namespace

void launch_plan_kernel(const MlaDecodePlanParams& params, const DecodeLaunchShape& shape,
                        int32_t* plan, int32_t* combine_counters, int64_t num_combine_counters,
                        int min_cost_per_part, bool sequence_aligned, cudaStream_t stream) {
  PlanKernelArgs args{params.seqlens,
                      plan,
                      combine_counters,
                      num_combine_counters,
                      params.batch,
                      shape.num_parts,
                      params.max_pages_per_seq,
                      min_cost_per_part,
                      sequence_aligned,
                      shape.rows_per_tile};
  // Within the 48 KB a launch gets without opting in: kDecodePlanStagedMaxBytes (40 KB) of staging
  // and the kernel's static shared memory (ptxas: 4,368 B).
  const size_t staged_bytes =
      decode_plan_staged(args.batch, args.num_parts)
          ? decode_plan_staged_ints(args.batch, args.num_parts) * sizeof(int32_t)
          : 0;
  mla_decode_plan_kernel<<<1, kPlanThreads, staged_bytes, stream>>>(args);
  MLA_CHECK_LAUNCH("mla_decode_plan");
}

namespace {

template <bool kTimeline>
void launch_combine(const DecodeKernelArgs& args, DecodeCombineLaunch how, cudaStream_t stream) {
  const CombineGrid g = combine_grid(args.params, args.shape, how);
  const dim3 grid(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y));
  if (how == DecodeCombineLaunch::kSliced) {
    constexpr int kFull = kSliceSplitsPerThread;
    auto* kernel = g.slices == 8   ? &mla_decode_combine_sliced_kernel<8, kFull, kTimeline>
                   : g.slices == 4 ? &mla_decode_combine_sliced_kernel<4, kFull, kTimeline>
                   : g.slices == 2 ? &mla_decode_combine_sliced_kernel<2, kFull, kTimeline>
                   : sliced_combine_light(g, args.params.num_sms)
                       ? &mla_decode_combine_sliced_kernel<1, kSliceSplitsPerThreadLight, kTimeline>
                       : &mla_decode_combine_sliced_kernel<1, kFull, kTimeline>;
    launch_programmatic_dependent(kernel, grid, dim3(kThreads), 0, stream, args);
    MLA_CHECK_LAUNCH("mla_decode_combine_sliced (programmatic dependent launch)");
    return;
  }
  if (how == DecodeCombineLaunch::kOneWaveDependent) {
    launch_programmatic_dependent(mla_decode_combine_one_wave_kernel<kTimeline>, grid,
                                  dim3(kCombineRowsPerBlock * 32), 0, stream, args);
    MLA_CHECK_LAUNCH("mla_decode_combine_one_wave (programmatic dependent launch)");
    return;
  }
  if (how == DecodeCombineLaunch::kPerRowDependent) {
    launch_programmatic_dependent(mla_decode_combine_kernel<kTimeline>, grid,
                                  dim3(kCombineRowsPerBlock * 32), 0, stream, args);
    MLA_CHECK_LAUNCH("mla_decode_combine (programmatic dependent launch)");
    return;
  }
  mla_decode_combine_kernel<kTimeline><<<grid, kCombineRowsPerBlock * 32, 0, stream>>>(args);
  MLA_CHECK_LAUNCH("mla_decode_combine");
}

}  // namespace

void launch_combine_kernel(const DecodeKernelArgs& args, DecodeCombineLaunch how,
                           cudaStream_t stream) {
  if (args.combine_timeline != nullptr) {
    launch_combine<true>(args, how, stream);
  } else {
    launch_combine<false>(args, how, stream);
  }
}

}  // namespace decode
}  // namespace mla::kernels
