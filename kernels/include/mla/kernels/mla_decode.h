// MLA decode attention over a paged latent cache: the host API (plain C++).
//
// Semantics follow DeepSeek FlashMLA's `flash_mla_with_kvcache`, so engine authors recognise them:
// every query row attends to the sequence's latent cache with d_qk = 576 (512 latent + 64 rope)
// and d_v = 512 (the latent itself: V is the first 512 columns of K). With causal and s_q > 1,
// query i of a sequence of length L sees keys [0, L - s_q + i]. A row that sees no key (seqlen 0)
// gets out = 0 and lse = +inf.
//
// Use, once per decode step and then once per layer:
//   size_t bytes = mla_decode_workspace_size(b, s_q, h_q, h_kv, num_sms);   // caller allocates
//   launch_mla_decode_plan({seqlens, b, s_q, h_q, h_kv, num_sms, max_pages, workspace}, stream);
//   for each layer: launch_mla_decode(params /* same workspace */, stream);
// The plan is computed on the device from the device seqlens: no host synchronisation, so the
// whole step can be captured in a CUDA graph and replayed with new seqlens. The plan also zeroes
// kFast's combine counters in the workspace; each fused launch adds a split sequence's number of
// pieces to its counter (they only grow within a step), so the layers of a step reuse the plan as
// is, but a launch with another shape or plan needs a new plan first. A workspace must not be
// shared by launches that may run at the same time (it holds the partials).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtypes.h"
#include "mla/kernels/mla_decode_plan.h"

namespace mla::kernels {

// Which decode kernel runs. kBaseline: split-KV over the plan with a two-stage TMA page pipeline;
// mma.sync on 16-row tiles when a kv head has at most 16 query rows, wgmma on 64-row tiles above
// (see docs/kernels/mla_decode.md for the measurements behind the choices), then an LSE combine.
// kFast: the kernel being built to beat FlashMLA (issue 3); the same plan and mma.sync body (two
// page stages, queries in registers), the seesaw wgmma body above 16 rows (MlaDecodeSchedule), and
// its combine launched as a programmatic dependent (sliced for small batches) or, on
// request, fused in (MlaDecodeCombine).
enum class MlaDecodeKernel { kBaseline, kFast };
const char* to_string(MlaDecodeKernel kernel);

// How kFast merges the pieces of a split sequence (kBaseline always launches its combine kernel).
// kFused: inside the split-KV kernel, so the op is one launch. Each CTA arrives on its sequence's
// counter after storing a piece's partial; after its last piece it waits for the sequence's other
// pieces, then merges its own share of the output columns (fused_combine.cuh). Its CTAs wait for
// each other, so the grid must fit the device's SMs: launch_mla_decode() throws when kFused is
// asked for a grid that does not (num_sms above the device's SMs, or h_kv × row tiles beyond
// them). It also assumes those SMs are this grid's alone until it ends (no MPS share or green
// context smaller than the device, no kernel that never finishes beside it) and that the plan was
// made for this launch (same batch, num_sms and seqlens): otherwise a CTA waits for a piece that
// never arrives. kLaunched: a combine kernel follows as a programmatic dependent
// launch (sliced where decode_combine_is_sliced()). kAuto: kLaunched. Measured on
// the H200 (2026-11-30, commit 1374d7e, `mla bench decode --kernel combine-ab`, interleaved
// medians, µs, fused vs launched): b = 1, h_q = 16: 16.6 vs 13.6 at s_k = 1024, 29.9–32.8 vs
// 26.9–29.1 at 32768; b = 8, h_q = 16, s_k = 4096: 28.3–31.4 vs 31.1–34.8; b = 32, s_q = 2,
// h_q = 128: 156.1 vs 148.7; b = 128, varlen h_q = 64: 215.6 vs 200.4. The full sweep with kFused
// for small batches lost to the baseline's combine on most b = 1 and b = 8 rows with h_q ≥ 32.
// The environment variable MLA_DECODE_COMBINE (auto, fused, launched) overrides kAuto for
// measuring.
enum class MlaDecodeCombine { kAuto, kFused, kLaunched };
const char* to_string(MlaDecodeCombine combine);
// Small batch (kFast's 64-row tiles then run P·V first, MlaDecodeSchedule): sequences split at
// least this many ways (num_parts ≥ this · b) and the batch has at most kSmallBatchMaxRows query
// rows (b · h_kv · s_q · h_q / h_kv).
inline constexpr int kSmallBatchMinPartsPerSeq = 4;
inline constexpr int kSmallBatchMaxRows = 512;
// kFast's launched combine is the sliced kernel for batches split as a small batch is with up to
// this many query rows (decode_combine_is_sliced()), else one warp per row in one wave. Measured on
// the H200 (2026-11-30, the sliced combine against one warp per row, two interleaved pairs each,
// µs): b = 8, h_q = 64, s_k = 4096 (512 rows) 32.8-35.8 vs 38.5-41.9; b = 32, h_q = 16 (512 rows,
// ~4 parts per sequence) 57.7-60.0 vs 62.0-62.5; but b = 32, h_q = 128 (4096 rows, ~2 parts)
// 117-130 vs 105-108. Where its grid has more CTAs than two an SM it runs a light form that fits
// four (2026-12-02: b = 32, h_q = 16, s_k = 4096 55.4 vs 58.3 µs; MLA_DECODE_SLICED_LIGHT=0 in the
// environment keeps the full form, for measuring). With it, the row limit (2026-12-02, same
// binary, 1024 against 512, fast µs): b = 8 with 128 rows per kv head 26.8 → 24.4 at 1024, 38.6 →
// 35.9 at 4096, 50.3 → 47.8 at 8192, 130.9 → 128.9 at 32768 (those rows keep the pairs order); the
// 32-row tiles at b = 32 −1.9 to +0.5 % (fast/baseline). 2048 against 1024:
// every row of 2048 query rows slower, +0.6 to +13 % (b = 8, s_q = 2, h_q = 128, 1024: 31.1
// against 27.5 µs). MLA_DECODE_SMALL_BATCH_MAX_ROWS in the environment overrides it (for
// measuring; the name is older than this split).
inline constexpr int kSlicedCombineMaxRows = 1024;

// Which 64-row body kFast runs when a kv head has more than 16 query rows (at most 16: the mma.sync
// body; kBaseline: always the lockstep body). kLockstep: kBaseline's wgmma body, both warpgroups
// doing S, softmax and P·V together. kSeesaw*: the two warpgroups alternate pages, one computing a
// whole page's S while the other runs P·V (docs/kernels/mla_decode.md); kSeesawSFirst issues S of
// a warpgroup's page before the P·V of the other's (the overlap, for compute-bound tiles),
// kSeesawPvFirst the P·V first (its page stage is freed earlier, for memory-bound tiles), kSeesaw
// picks S first when a kv head has at least kSeesawSFirstMinRows rows (two or more tiles, so
// pages mostly come from L2). kSeesawPairs: pages in pairs, one per warpgroup, both S of a pair
// issued back to back and pages copied and freed by halves (after FlashMLA's published schedule).
// kAuto: kSeesawPairs, except kSeesawPvFirst for small batches (decode_batch_is_small() with the
// default thresholds: pieces of a few pages, where the pairs' exchanges cost more than they
// give); measured on the H200 (2026-12-01, `mla bench decode --kernel seesaw-ab`): pairs 3-6 %
// faster than P·V first on the compute-bound rows, even on memory-bound ones, but up to 6 µs
// slower at b = 1. The environment variable MLA_DECODE_SEESAW overrides kAuto (0: kLockstep,
// 1: kSeesaw, 2: kSeesawSFirst, 3: kSeesawPvFirst, 4: kSeesawPairs; read once per process; for
// A/B measurements). resolved_decode_schedule() says which. The seesaw copies its 64-row query
// tiles with the TMA engine where a tile is one box (h_q / h_kv a multiple or a divisor of 64),
// else with cp.async; MLA_DECODE_QUERY_TMA=0 keeps cp.async everywhere (for A/B measurements).
enum class MlaDecodeSchedule {
  kAuto,
  kLockstep,
  kSeesaw,
  kSeesawSFirst,
  kSeesawPvFirst,
  kSeesawPairs
};
inline constexpr int kSeesawSFirstMinRows = 128;
const char* to_string(MlaDecodeSchedule schedule);

struct MlaDecodePlanParams {
  const int32_t* seqlens = nullptr;  // [batch] int32, device
  int batch = 0;
  int seqlen_q = 1;
  int num_heads_q = 0;
  int num_heads_kv = 1;
  int num_sms = 0;            // SMs the plan spreads over (the device's count)
  int max_pages_per_seq = 0;  // block_table row length: seqlens are clamped to it
  void* workspace = nullptr;  // mla_decode_workspace_size(...) bytes, 256-byte aligned
  size_t workspace_bytes = 0;
  // Each part's cost is at least this many units (pages; see mla_decode_plan.h): fewer, longer
  // pieces for small batches, e.g. for kFast's fused combine. 0: the balanced plan, or
  // MLA_DECODE_MIN_COST_PER_PART from the environment when set (for measuring).
  int min_cost_per_part = 0;
  // May make the sequence-aligned plan (mla_decode_plan.h: every part at most one piece, taken
  // when it puts no more pages on a part than the balanced plan). false, or
  // MLA_DECODE_SEQUENCE_ALIGNED=0 in the environment (for measuring): the balanced plan always.
  bool sequence_aligned = true;
};

struct MlaDecodeParams {
  // Shape. head dims and page size are stated by the caller and validated, never assumed.
  int batch = 0;         // b
  int seqlen_q = 1;      // s_q: query tokens per sequence (1; 2..4 for MTP/speculative)
  int num_heads_q = 0;   // h_q
  int num_heads_kv = 1;  // h_kv (1 for MLA); h_q % h_kv == 0
  int head_dim_qk = kHeadDimQK;
  int head_dim_v = kHeadDimV;
  int page_size = kPageSize;  // tokens per cache page
  int num_pages = 0;          // pages in the cache
  int max_pages_per_seq = 0;  // block_table row length
  float softmax_scale = 0.f;  // qk_head_dim^-0.5 · mscale² for DeepSeek (not 576^-0.5)
  bool causal = false;

  const bf16* q = nullptr;  // [b, s_q, h_q, 576] bf16, strides in elements
  int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
  const bf16* kv_cache = nullptr;  // [num_pages, 64, h_kv, 576] bf16
  int64_t kv_page_stride = 0, kv_token_stride = 0, kv_head_stride = 0;
  const int32_t* block_table = nullptr;  // [b, max_pages_per_seq] int32 page ids
  int64_t block_table_batch_stride = 0;
  const int32_t* seqlens = nullptr;  // [b] int32, device: keys per sequence
  bf16* out = nullptr;               // [b, s_q, h_q, 512] bf16
  int64_t out_batch_stride = 0, out_seq_stride = 0, out_head_stride = 0;
  float* lse = nullptr;  // [b, h_q, s_q] fp32, contiguous, natural log

  int num_sms = 0;  // as given to the plan
  // kFast only, > 16 rows per kv head. Declared here, in the padding before `workspace`, so the
  // kernels' argument layout (and kBaseline's SASS) is the same as without it.
  MlaDecodeSchedule schedule = MlaDecodeSchedule::kAuto;
  void* workspace = nullptr;  // the plan's workspace (holds the plan and split-KV partials)
  size_t workspace_bytes = 0;
  MlaDecodeKernel kernel = MlaDecodeKernel::kBaseline;
  MlaDecodeCombine combine = MlaDecodeCombine::kAuto;  // kFast only

  // Fills every stride for contiguous tensors of the documented shapes.
  void set_contiguous_strides();
};

// The device facts validation needs (filled from cudaGetDeviceProperties by the caller).
struct DecodeDeviceFacts {
  int compute_major = 0;
  int compute_minor = 0;
  int num_sms = 0;
};

// Workspace bytes for the plan and the split-KV partials of one step.
size_t mla_decode_workspace_size(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                                 int num_sms);

// Boundary validation; throws mla::Error naming the argument, the expected and the actual value.
void check_mla_decode_plan_args(const MlaDecodePlanParams& params, const DecodeDeviceFacts& device);
void check_mla_decode_args(const MlaDecodeParams& params, const DecodeDeviceFacts& device);

// Facts of the current CUDA device (throws mla::Error without one).
DecodeDeviceFacts current_decode_device_facts();

// Validate, then launch. Asynchronous on `stream`; no allocation; CUDA-graph capturable.
void launch_mla_decode_plan(const MlaDecodePlanParams& params, cudaStream_t stream);
void launch_mla_decode(const MlaDecodeParams& params, cudaStream_t stream);

// Diagnostics: launch_mla_decode() with kFast's split-KV body stamping when each CTA reaches each
// phase, for `mla bench decode --timeline`: the 16-row body (h_q / h_kv · s_q ≤ 16), or the
// seesaw's pairs or P·V-first order with the launched combine (decode_timeline_applies();
// otherwise mla::Error). `timeline` (device memory, zeroed by the caller) receives, per CTA of the
// split-KV grid (blockIdx.y · gridDim.x + blockIdx.x), kDecodeTimelineSlots %globaltimer values
// (ns) then as many clock64 values (cycles of its SM), and after all CTAs' stamps one word per CTA
// in the same order, the SM it ran on (%smid); a slot a CTA never reaches stays 0. Phases,
// in order: entry, first piece known, the first piece's queries loaded, its first page landed (the
// seesaw's pairs order: the first page's half that warpgroup 0's S reads first), the last piece's
// pages computed, its output stored, exit. It runs a separate instantiation of the same body (the
// production kernels are unchanged). After the SM words, the launched combine's CTAs (blockIdx.y ·
// gridDim.x + blockIdx.x; also separate instantiations) each stamp kDecodeCombineTimelineSlots
// %globaltimer values at decode_timeline_combine_word(): its start, past its wait for the split
// grid, and thread 0's end: its warp's in the per-row and sliced combines (a warp with nothing to
// merge ends right after the wait), the whole CTA's in the one-wave combine (after its last
// barrier); with the fused combine, which launches none, those words stay 0.
inline constexpr int kDecodeTimelineSlots = 7;
inline constexpr int kDecodeCombineTimelineSlots = 3;
// split CTAs · (2 · slots + 1) + combine CTAs · combine slots.
int64_t mla_decode_timeline_words(const MlaDecodeParams& params);
// The split-KV grid's CTAs, and the launched combine's (whether or not this launch fuses it).
int64_t decode_timeline_split_ctas(const MlaDecodeParams& params);
int64_t decode_timeline_combine_ctas(const MlaDecodeParams& params);
// Where CTA `cta` (of `ctas`) of a timeline finds its stamps, and the word holding its SM id.
MLA_HOST_DEVICE int64_t decode_timeline_stamps_word(int64_t cta) {
  return cta * 2 * kDecodeTimelineSlots;
}
MLA_HOST_DEVICE int64_t decode_timeline_sm_word(int64_t ctas, int64_t cta) {
  return ctas * 2 * kDecodeTimelineSlots + cta;
}
// Where combine CTA `combine_cta` finds its stamps, after a split grid of `split_ctas`.
MLA_HOST_DEVICE int64_t decode_timeline_combine_word(int64_t split_ctas, int64_t combine_cta) {
  return split_ctas * (2 * kDecodeTimelineSlots + 1) + combine_cta * kDecodeCombineTimelineSlots;
}
bool decode_timeline_applies(const MlaDecodeParams& params);
void launch_mla_decode_with_timeline(const MlaDecodeParams& params, uint64_t* timeline,
                                     cudaStream_t stream);

// Diagnostics: launch_mla_decode() with kFast's seesaw pairs order recording when each step of a
// pair happens, for `mla bench decode --pair-trace`. Every CTA records the first
// kDecodePairTracePairs pairs with two pages of its piece number `piece` (0: its first piece; a CTA
// with fewer pieces records nothing): `trace` (device memory, decode_pair_trace_words(params)
// uint64, zeroed by the caller) receives CTA c's clock64 values at c · kDecodePairTraceWords +
// (warpgroup · kDecodePairTracePairs + pair) · kDecodePairTraceEvents + event, c = blockIdx.y ·
// gridDim.x + blockIdx.x (CTA (0, 0)'s words come first); an event never reached stays 0. Clocks
// are per SM: compare stamps within a CTA only. The events, per warpgroup, are named by
// decode_pair_trace_event(). A separate instantiation of the same body (the
// production kernels are unchanged). Throws mla::Error unless the launch runs the pairs order
// (kFast, more than 16 rows per kv head, decode_resolved_schedule() kSeesawPairs) with the
// launched combine.
inline constexpr int kDecodePairTracePairs = 8;
inline constexpr int kDecodePairTraceEvents = 13;
inline constexpr int kDecodePairTracePairWords = 2 * kDecodePairTracePairs * kDecodePairTraceEvents;
// After its pairs' words, each CTA records its pieces (every one, not only `piece`; the first
// kDecodePieceTracePieces): piece k's field f at c · kDecodePairTraceWords +
// kDecodePairTracePairWords + k · kDecodePieceTraceFields + f. Fields 0 to
// kDecodePieceTraceEvents − 1 are the clock64 values of thread 0 reaching the events named by
// decode_piece_trace_event() (0: not reached); the last field is the piece's page count. A CTA's
// pieces past the first kDecodePieceTracePieces are not recorded.
inline constexpr int kDecodePieceTracePieces = 8;
inline constexpr int kDecodePieceTraceEvents = 5;
inline constexpr int kDecodePieceTraceFields = kDecodePieceTraceEvents + 1;
inline constexpr int kDecodePairTraceWords =
    kDecodePairTracePairWords + kDecodePieceTracePieces * kDecodePieceTraceFields;
const char* decode_pair_trace_event(int warpgroup, int event);
const char* decode_piece_trace_event(int event);
// Whether a launch with these params runs the pairs order (what the pair trace records).
bool decode_pair_trace_applies(const MlaDecodeParams& params);
// The trace's size in uint64 words: kDecodePairTraceWords per CTA of the launch's grid.
int64_t decode_pair_trace_words(const MlaDecodeParams& params);
void launch_mla_decode_with_pair_trace(const MlaDecodeParams& params, uint64_t* trace,
                                       cudaStream_t stream, int piece = 0);

// Where the plan and the partials live inside the workspace (exposed for tests and tools).
struct DecodeWorkspaceLayout {
  size_t plan_offset = 0;              // int32[decode_plan_ints(batch, num_parts)]
  size_t combine_counters_offset = 0;  // int32[num_combine_counters]: kFast's arrival counters
  size_t partial_lse_offset = 0;       // fp32[max_splits, h_kv, rows_per_kv_head]
  size_t partial_out_offset = 0;       // fp32[max_splits, h_kv, rows_per_kv_head, 512]
  size_t total_bytes = 0;
  int max_splits = 0;                // batch + num_parts: the most pieces a plan can make
  int64_t num_combine_counters = 0;  // batch · h_kv · num_row_tiles
};
DecodeWorkspaceLayout decode_workspace_layout(int batch, int seqlen_q, int num_heads_q,
                                              int num_heads_kv, int num_sms);

// The combine a launch with these params uses: kLaunched for kBaseline; for kFast, params.combine,
// with kAuto resolved by the environment's MLA_DECODE_COMBINE when set (a value other than auto,
// fused, launched throws mla::Error), else kLaunched. launch_mla_decode() launches the combine
// instead of an environment-chosen kFused whose grid does not fit the device's SMs.
MlaDecodeCombine resolved_decode_combine(const MlaDecodeParams& params);
// Whether a shape counts as a small batch (kSmallBatchMinPartsPerSeq, kSmallBatchMaxRows, or the
// thresholds given): kFast's kAuto schedule is then P·V first.
bool decode_batch_is_small(int batch, int seqlen_q, int num_heads_q, int num_heads_kv, int num_sms,
                           int64_t min_parts_per_seq = kSmallBatchMinPartsPerSeq,
                           int64_t max_rows = kSmallBatchMaxRows);
// Whether kFast's launched combine is the sliced kernel for a shape: sequences split at least
// kSmallBatchMinPartsPerSeq ways (MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ from the environment
// when set, always read) with at most max_rows query rows (kSlicedCombineMaxRows, or
// MLA_DECODE_SMALL_BATCH_MAX_ROWS from the environment when set, where max_rows ≤ 0).
bool decode_combine_is_sliced(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                              int num_sms, int64_t max_rows = 0);
// The 64-row body a launch with these params uses: kLockstep for kBaseline; for kFast,
// params.schedule, with kAuto resolved by the environment's MLA_DECODE_SEESAW (unset:
// kSeesawPairs, or kSeesawPvFirst for a small batch; a value outside 0..4 throws mla::Error) and
// kSeesaw by the rows per kv head (s_q · h_q / h_kv): never kAuto nor kSeesaw.
MlaDecodeSchedule resolved_decode_schedule(const MlaDecodeParams& params);
// The plan's min_cost_per_part: params.min_cost_per_part when > 0, else the environment's
// MLA_DECODE_MIN_COST_PER_PART, else 0.
int plan_min_cost_per_part(const MlaDecodePlanParams& params);
// Whether the plan may be sequence-aligned: params.sequence_aligned, unless the environment's
// MLA_DECODE_SEQUENCE_ALIGNED is 0.
bool plan_sequence_aligned(const MlaDecodePlanParams& params);

}  // namespace mla::kernels
