// Host side of the MLA decode op: workspace layout, boundary validation, and the launchers.
//
// Validation happens here, once, with messages that name the argument, the expected and the
// actual value; the kernels trust their params.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/arg_checks.h"
#include "core/environment.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/tensor_map.h"
#include "mla/kernels/mla_decode.h"
#include "mla/kernels/phase_marks.h"
#include "mla_decode/kernel_args.h"

namespace mla::kernels {
namespace decode {
void launch_plan_kernel(const MlaDecodePlanParams& params, const DecodeLaunchShape& shape,
                        int32_t* plan, int32_t* combine_counters, int64_t num_combine_counters,
                        int min_cost_per_part, bool sequence_aligned, cudaStream_t stream);
}  // namespace decode

namespace {

constexpr size_t kWorkspaceAlignment = 256;
constexpr int kMaxHeadsPerKvHead = 128;
constexpr int kMaxSeqlenQ = 128;
constexpr int kMaxBatch = 65535;  // the combine grid's y dimension

size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

void require(bool ok, const std::string& message) {
  arg_checks::require(ok, "mla_decode", message);
}

void check_shape(int batch, int seqlen_q, int num_heads_q, int num_heads_kv) {
  require(batch >= 0 && batch <= kMaxBatch,
          fmt::format("batch must be in [0, {}], got {}", kMaxBatch, batch));
  require(seqlen_q >= 1 && seqlen_q <= kMaxSeqlenQ,
          fmt::format("seqlen_q (s_q) must be in [1, {}], got {}", kMaxSeqlenQ, seqlen_q));
  require(num_heads_kv >= 1, fmt::format("num_heads_kv must be >= 1, got {}", num_heads_kv));
  require(num_heads_q >= 1 && num_heads_q % num_heads_kv == 0,
          fmt::format("num_heads_q must be a positive multiple of num_heads_kv, got h_q = {}, "
                      "h_kv = {}",
                      num_heads_q, num_heads_kv));
  require(num_heads_q / num_heads_kv <= kMaxHeadsPerKvHead,
          fmt::format("num_heads_q / num_heads_kv must be in [1, {}], got {} / {} = {}",
                      kMaxHeadsPerKvHead, num_heads_q, num_heads_kv, num_heads_q / num_heads_kv));
}

void check_device(const DecodeDeviceFacts& device) {
  require(device.compute_major == 9 && device.compute_minor == 0,
          fmt::format("needs an sm_90 GPU (H100/H200; the kernels are built for sm_90a), found "
                      "sm_{}{}",
                      device.compute_major, device.compute_minor));
}

void check_workspace(const void* workspace, size_t workspace_bytes, size_t required) {
  require(workspace != nullptr, "workspace is null (allocate mla_decode_workspace_size() bytes)");
  require(arg_checks::aligned(workspace, kWorkspaceAlignment),
          fmt::format("workspace must be {}-byte aligned, got address {}", kWorkspaceAlignment,
                      workspace));
  require(workspace_bytes >= required,
          fmt::format("workspace has {} bytes, needs {} (mla_decode_workspace_size() for this "
                      "batch, s_q, h_q, h_kv and num_sms)",
                      workspace_bytes, required));
}

void check_pointer(const void* pointer, const char* name, size_t alignment) {
  arg_checks::check_pointer("mla_decode", name, pointer, alignment);
}

void check_stride(int64_t stride, const char* name, int64_t minimum) {
  arg_checks::check_stride("mla_decode", name, stride, minimum);
}

// The launched combine's kernel: kFast's sliced one where decode_combine_is_sliced(), else one
// warp per row in one wave of CTAs (the grid of a CTA per 8 rows of every sequence with
// MLA_DECODE_COMBINE_ONE_WAVE=0), all as programmatic dependents.
decode::DecodeCombineLaunch launched_combine_kind(const MlaDecodeParams& params, bool fast) {
  using decode::DecodeCombineLaunch;
  if (!fast) return DecodeCombineLaunch::kPerRow;
  static const bool one_wave =
      integer_from_environment("MLA_DECODE_COMBINE_ONE_WAVE", 0, 1).value_or(1) != 0;
  if (decode_combine_is_sliced(params.batch, params.seqlen_q, params.num_heads_q,
                               params.num_heads_kv, params.num_sms))
    return DecodeCombineLaunch::kSliced;
  return one_wave ? DecodeCombineLaunch::kOneWaveDependent : DecodeCombineLaunch::kPerRowDependent;
}

// The queries as a map for the seesaw's query tiles (kernel_args.h): {576 columns, heads of a kv
// head, kv heads, query positions, batch}, or false where a tile is not one box (heads per kv head
// neither a multiple nor a divisor of 64) or a dimension of several elements has a stride of 0. A
// dimension of extent 1 gets the stride a contiguous layout would give it (the params may say 0).
bool query_tile_map_spec(const MlaDecodeParams& params, int heads_per_kv,
                         cuda::TensorMapBf16Spec* spec) {
  if (!decode::query_tile_tma_applies(heads_per_kv)) return false;
  spec->base = params.q;
  spec->rank = 5;
  const uint64_t dims[5] = {uint64_t(kHeadDimQK), uint64_t(heads_per_kv),
                            uint64_t(params.num_heads_kv), uint64_t(params.seqlen_q),
                            uint64_t(params.batch)};
  const int64_t strides[4] = {params.q_head_stride, params.q_head_stride * heads_per_kv,
                              params.q_seq_stride, params.q_batch_stride};
  int64_t contiguous = kHeadDimQK;  // elements a contiguous layout spans inside dimension d
  for (int d = 0; d < 5; ++d) {
    spec->dims[d] = dims[d];
    if (d == 0) continue;
    const int64_t stride = dims[d] > 1 ? strides[d - 1] : contiguous;
    if (stride <= 0) return false;
    spec->strides_bytes[d - 1] = static_cast<uint64_t>(stride) * sizeof(bf16);
    contiguous = stride * static_cast<int64_t>(dims[d]);
  }
  const uint32_t heads_in_box = static_cast<uint32_t>(std::min(heads_per_kv, 64));
  const uint32_t box[5] = {64, heads_in_box, 1, 64 / heads_in_box, 1};
  for (int d = 0; d < 5; ++d) spec->box[d] = box[d];
  return true;
}

// The seesaw's query tiles by TMA where they apply, unless the environment's MLA_DECODE_QUERY_TMA
// is 0 (read once per process, for measuring).
bool query_tma_from_environment() {
  static const bool on = integer_from_environment("MLA_DECODE_QUERY_TMA", 0, 1).value_or(1) != 0;
  return on;
}

// The seesaw's grid with a part's row tiles next to each other (FlashMLA's grid order; 2.6 % off
// the compute-bound rows' time, sixteenth session), unless the environment's
// MLA_DECODE_TILE_MAJOR is 0 (read once per process, for measuring).
bool tile_major_from_environment() {
  static const bool on = integer_from_environment("MLA_DECODE_TILE_MAJOR", 0, 1).value_or(1) != 0;
  return on;
}

}  // namespace

int plan_min_cost_per_part(const MlaDecodePlanParams& params) {
  if (params.min_cost_per_part > 0) return params.min_cost_per_part;
  static const int from_environment = static_cast<int>(
      integer_from_environment("MLA_DECODE_MIN_COST_PER_PART", 0, int64_t(1) << 24).value_or(0));
  return from_environment;
}

bool plan_sequence_aligned(const MlaDecodePlanParams& params) {
  static const bool from_environment =
      integer_from_environment("MLA_DECODE_SEQUENCE_ALIGNED", 0, 1).value_or(1) != 0;
  return params.sequence_aligned && from_environment;
}

namespace decode {
bool sliced_combine_light(const CombineGrid& grid, int num_sms) {
  static const bool allowed =
      integer_from_environment("MLA_DECODE_SLICED_LIGHT", 0, 1).value_or(1) != 0;
  return allowed && grid.slices == 1 &&
         grid.x * grid.y > int64_t(kSlicedCombineCtasPerSm) * num_sms;
}
}  // namespace decode

const char* to_string(MlaDecodeCombine combine) {
  switch (combine) {
    case MlaDecodeCombine::kAuto:
      return "auto";
    case MlaDecodeCombine::kFused:
      return "fused";
    case MlaDecodeCombine::kLaunched:
      return "launched";
  }
  return "unknown";
}

bool decode_batch_is_small(int batch, int seqlen_q, int num_heads_q, int num_heads_kv, int num_sms,
                           int64_t min_parts_per_seq, int64_t max_rows) {
  if (batch <= 0 || num_heads_kv <= 0) return false;
  const DecodeLaunchShape shape = decode_launch_shape(seqlen_q, num_heads_q, num_heads_kv, num_sms);
  return shape.num_parts >= min_parts_per_seq * batch &&
         int64_t(batch) * num_heads_kv * shape.rows_per_kv_head <= max_rows;
}

bool decode_combine_is_sliced(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                              int num_sms, int64_t max_rows) {
  // The thresholds overridable for measuring: MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ and
  // MLA_DECODE_SMALL_BATCH_MAX_ROWS (read once per process).
  static const int64_t min_parts =
      integer_from_environment("MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ", 0, int64_t(1) << 24)
          .value_or(kSmallBatchMinPartsPerSeq);
  static const int64_t rows_from_environment =
      integer_from_environment("MLA_DECODE_SMALL_BATCH_MAX_ROWS", 0, int64_t(1) << 40)
          .value_or(kSlicedCombineMaxRows);
  return decode_batch_is_small(batch, seqlen_q, num_heads_q, num_heads_kv, num_sms, min_parts,
                               max_rows > 0 ? max_rows : rows_from_environment);
}

MlaDecodeCombine resolved_decode_combine(const MlaDecodeParams& params) {
  if (params.kernel != MlaDecodeKernel::kFast) return MlaDecodeCombine::kLaunched;
  if (params.combine != MlaDecodeCombine::kAuto) return params.combine;
  static const bool fused_by_environment = [] {
    const char* text = std::getenv("MLA_DECODE_COMBINE");
    const std::string value = text != nullptr ? text : "";
    require(value.empty() || value == "auto" || value == "fused" || value == "launched",
            fmt::format("MLA_DECODE_COMBINE must be auto, fused or launched, got '{}'", value));
    return value == "fused";
  }();
  return fused_by_environment ? MlaDecodeCombine::kFused : MlaDecodeCombine::kLaunched;
}

const char* to_string(MlaDecodeSchedule schedule) {
  switch (schedule) {
    case MlaDecodeSchedule::kAuto:
      return "auto";
    case MlaDecodeSchedule::kLockstep:
      return "lockstep";
    case MlaDecodeSchedule::kSeesaw:
      return "seesaw";
    case MlaDecodeSchedule::kSeesawSFirst:
      return "seesaw_s_first";
    case MlaDecodeSchedule::kSeesawPvFirst:
      return "seesaw_pv_first";
    case MlaDecodeSchedule::kSeesawPairs:
      return "seesaw_pairs";
  }
  return "unknown";
}

MlaDecodeSchedule resolved_decode_schedule(const MlaDecodeParams& params) {
  if (params.kernel != MlaDecodeKernel::kFast) return MlaDecodeSchedule::kLockstep;
  MlaDecodeSchedule schedule = params.schedule;
  if (schedule == MlaDecodeSchedule::kAuto) {
    static const std::optional<int64_t> from_environment =
        integer_from_environment("MLA_DECODE_SEESAW", 0, 4);
    constexpr MlaDecodeSchedule kByValue[] = {
        MlaDecodeSchedule::kLockstep, MlaDecodeSchedule::kSeesaw, MlaDecodeSchedule::kSeesawSFirst,
        MlaDecodeSchedule::kSeesawPvFirst, MlaDecodeSchedule::kSeesawPairs};
    // Pairs where pieces are long; its per-pair exchanges cost more than they give when a CTA
    // has a page or two (small batches: measured on the H200, 2026-12-01, up to +6 µs at b = 1).
    const bool small = params.num_sms >= 1 && params.batch >= 1 && params.num_heads_kv >= 1 &&
                       decode_batch_is_small(params.batch, params.seqlen_q, params.num_heads_q,
                                             params.num_heads_kv, params.num_sms);
    schedule = from_environment ? kByValue[*from_environment]
               : small          ? MlaDecodeSchedule::kSeesawPvFirst
                                : MlaDecodeSchedule::kSeesawPairs;
  }
  if (schedule == MlaDecodeSchedule::kSeesaw) {
    const int64_t rows = params.num_heads_kv > 0
                             ? int64_t(params.seqlen_q) * params.num_heads_q / params.num_heads_kv
                             : 0;
    schedule = rows >= kSeesawSFirstMinRows ? MlaDecodeSchedule::kSeesawSFirst
                                            : MlaDecodeSchedule::kSeesawPvFirst;
  }
  return schedule;
}

const char* to_string(MlaDecodeKernel kernel) {
  switch (kernel) {
    case MlaDecodeKernel::kBaseline:
      return "baseline";
    case MlaDecodeKernel::kFast:
      return "fast";
  }
  return "unknown";
}

void MlaDecodeParams::set_contiguous_strides() {
  q_head_stride = head_dim_qk;
  q_seq_stride = int64_t(num_heads_q) * head_dim_qk;
  q_batch_stride = int64_t(seqlen_q) * q_seq_stride;
  kv_head_stride = head_dim_qk;
  kv_token_stride = int64_t(num_heads_kv) * head_dim_qk;
  kv_page_stride = int64_t(page_size) * kv_token_stride;
  block_table_batch_stride = max_pages_per_seq;
  out_head_stride = head_dim_v;
  out_seq_stride = int64_t(num_heads_q) * head_dim_v;
  out_batch_stride = int64_t(seqlen_q) * out_seq_stride;
}

DecodeWorkspaceLayout decode_workspace_layout(int batch, int seqlen_q, int num_heads_q,
                                              int num_heads_kv, int num_sms) {
  check_shape(batch, seqlen_q, num_heads_q, num_heads_kv);
  require(num_sms >= 1, fmt::format("num_sms must be >= 1, got {}", num_sms));
  const DecodeLaunchShape shape = decode_launch_shape(seqlen_q, num_heads_q, num_heads_kv, num_sms);
  DecodeWorkspaceLayout layout;
  layout.max_splits = batch + shape.num_parts;
  layout.num_combine_counters = int64_t(batch) * num_heads_kv * shape.num_row_tiles;
  const size_t partial_rows = size_t(layout.max_splits) * num_heads_kv * shape.rows_per_kv_head;
  layout.plan_offset = 0;
  layout.combine_counters_offset =
      align_up(sizeof(int32_t) * decode_plan_ints(batch, shape.num_parts), kWorkspaceAlignment);
  layout.partial_lse_offset =
      layout.combine_counters_offset +
      align_up(sizeof(int32_t) * size_t(layout.num_combine_counters), kWorkspaceAlignment);
  layout.partial_out_offset =
      layout.partial_lse_offset + align_up(sizeof(float) * partial_rows, kWorkspaceAlignment);
  layout.total_bytes = layout.partial_out_offset + sizeof(float) * partial_rows * kHeadDimV;
  return layout;
}

size_t mla_decode_workspace_size(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                                 int num_sms) {
  return decode_workspace_layout(batch, seqlen_q, num_heads_q, num_heads_kv, num_sms).total_bytes;
}

void check_mla_decode_plan_args(const MlaDecodePlanParams& params,
                                const DecodeDeviceFacts& device) {
  check_device(device);
  check_shape(params.batch, params.seqlen_q, params.num_heads_q, params.num_heads_kv);
  require(params.num_sms >= 1, fmt::format("num_sms must be >= 1, got {}", params.num_sms));
  require(params.max_pages_per_seq >= 1,
          fmt::format("max_pages_per_seq must be >= 1, got {}", params.max_pages_per_seq));
  require(params.min_cost_per_part >= 0,
          fmt::format("min_cost_per_part must be >= 0, got {}", params.min_cost_per_part));
  if (params.batch > 0) check_pointer(params.seqlens, "seqlens", alignof(int32_t));
  check_workspace(params.workspace, params.workspace_bytes,
                  mla_decode_workspace_size(params.batch, params.seqlen_q, params.num_heads_q,
                                            params.num_heads_kv, params.num_sms));
}

void check_mla_decode_args(const MlaDecodeParams& p, const DecodeDeviceFacts& device) {
  check_device(device);
  check_shape(p.batch, p.seqlen_q, p.num_heads_q, p.num_heads_kv);
  require(p.head_dim_qk == kHeadDimQK,
          fmt::format("head_dim_qk must be {} (kv_lora_rank 512 + rope 64), got {}", kHeadDimQK,
                      p.head_dim_qk));
  require(p.head_dim_v == kHeadDimV,
          fmt::format("head_dim_v must be {} (kv_lora_rank), got {}", kHeadDimV, p.head_dim_v));
  require(p.page_size == kPageSize,
          fmt::format("page_size must be {} tokens, got {}", kPageSize, p.page_size));
  require(p.num_pages >= 1, fmt::format("num_pages must be >= 1, got {}", p.num_pages));
  require(p.max_pages_per_seq >= 1,
          fmt::format("max_pages_per_seq must be >= 1, got {}", p.max_pages_per_seq));
  require(std::isfinite(p.softmax_scale) && p.softmax_scale > 0.f,
          fmt::format("softmax_scale must be finite and > 0, got {}", p.softmax_scale));
  require(p.num_sms >= 1, fmt::format("num_sms must be >= 1, got {}", p.num_sms));
  check_workspace(
      p.workspace, p.workspace_bytes,
      mla_decode_workspace_size(p.batch, p.seqlen_q, p.num_heads_q, p.num_heads_kv, p.num_sms));
  if (p.batch == 0) return;
  check_pointer(p.q, "q", 16);
  check_pointer(p.kv_cache, "kv_cache", 16);
  check_pointer(p.block_table, "block_table", alignof(int32_t));
  check_pointer(p.seqlens, "seqlens", alignof(int32_t));
  check_pointer(p.out, "out", 16);
  check_pointer(p.lse, "lse", alignof(float));
  check_stride(p.q_head_stride, "q_head_stride", p.num_heads_q > 1 ? kHeadDimQK : 0);
  check_stride(p.q_seq_stride, "q_seq_stride", 0);
  check_stride(p.q_batch_stride, "q_batch_stride", 0);
  check_stride(p.kv_head_stride, "kv_head_stride", p.num_heads_kv > 1 ? kHeadDimQK : 0);
  check_stride(p.kv_token_stride, "kv_token_stride", kHeadDimQK);
  check_stride(p.kv_page_stride, "kv_page_stride", kPageSize * int64_t(kHeadDimQK));
  check_stride(p.out_head_stride, "out_head_stride", p.num_heads_q > 1 ? kHeadDimV : 0);
  check_stride(p.out_seq_stride, "out_seq_stride", 0);
  check_stride(p.out_batch_stride, "out_batch_stride", 0);
  require(p.block_table_batch_stride >= p.max_pages_per_seq,
          fmt::format("block_table_batch_stride must be >= max_pages_per_seq ({}), got {}",
                      p.max_pages_per_seq, p.block_table_batch_stride));
}

DecodeDeviceFacts current_decode_device_facts() {
  int ordinal = 0;
  MLA_CUDA_CHECK(cudaGetDevice(&ordinal));
  DecodeDeviceFacts facts;
  MLA_CUDA_CHECK(
      cudaDeviceGetAttribute(&facts.compute_major, cudaDevAttrComputeCapabilityMajor, ordinal));
  MLA_CUDA_CHECK(
      cudaDeviceGetAttribute(&facts.compute_minor, cudaDevAttrComputeCapabilityMinor, ordinal));
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&facts.num_sms, cudaDevAttrMultiProcessorCount, ordinal));
  return facts;
}

void launch_mla_decode_plan(const MlaDecodePlanParams& params, cudaStream_t stream) {
  check_mla_decode_plan_args(params, current_decode_device_facts());
  if (params.batch == 0) return;
  const DecodeLaunchShape shape =
      decode_launch_shape(params.seqlen_q, params.num_heads_q, params.num_heads_kv, params.num_sms);
  const DecodeWorkspaceLayout layout = decode_workspace_layout(
      params.batch, params.seqlen_q, params.num_heads_q, params.num_heads_kv, params.num_sms);
  auto* base = static_cast<uint8_t*>(params.workspace);
  decode::launch_plan_kernel(params, shape, reinterpret_cast<int32_t*>(base + layout.plan_offset),
                             reinterpret_cast<int32_t*>(base + layout.combine_counters_offset),
                             layout.num_combine_counters, plan_min_cost_per_part(params),
                             plan_sequence_aligned(params), stream);
}

namespace {

// timeline / pair_trace: the diagnostics' buffers (null for a plain launch).
void launch_decode(const MlaDecodeParams& params, uint64_t* timeline, uint64_t* pair_trace,
                   cudaStream_t stream, int pair_trace_piece = 0) {
  const DecodeDeviceFacts device = current_decode_device_facts();
  check_mla_decode_args(params, device);
  if (params.batch == 0) return;
  decode::DecodeKernelArgs args;
  args.params = params;
  args.timeline = timeline;
  args.pair_trace = pair_trace;
  args.pair_trace_piece = pair_trace_piece;
  args.shape =
      decode_launch_shape(params.seqlen_q, params.num_heads_q, params.num_heads_kv, params.num_sms);
  args.heads_per_kv = params.num_heads_q / params.num_heads_kv;
  const DecodeWorkspaceLayout layout = decode_workspace_layout(
      params.batch, params.seqlen_q, params.num_heads_q, params.num_heads_kv, params.num_sms);
  args.max_splits = layout.max_splits;
  args.scale_log2 = params.softmax_scale * static_cast<float>(M_LOG2E);
  auto* base = static_cast<uint8_t*>(params.workspace);
  args.plan = reinterpret_cast<const int32_t*>(base + layout.plan_offset);
  args.partial_lse = reinterpret_cast<float*>(base + layout.partial_lse_offset);
  args.partial_out = reinterpret_cast<float*>(base + layout.partial_out_offset);
  args.combine_counters = reinterpret_cast<int*>(base + layout.combine_counters_offset);

  const bool fast = params.kernel == MlaDecodeKernel::kFast;
  // kFast's fused combine: the split-KV kernel merges split sequences itself, no combine launch.
  // Its CTAs wait for each other, so all of them must be resident at once: at most one per SM.
  const int64_t grid_ctas = decode_grid_ctas(args.shape, params.num_heads_kv);
  const bool all_resident = grid_ctas <= device.num_sms;
  require(all_resident || !fast || params.combine != MlaDecodeCombine::kFused,
          fmt::format("combine kFused needs every CTA resident at once: the grid has {} CTAs "
                      "(num_sms {}), the device has {} SMs",
                      grid_ctas, params.num_sms, device.num_sms));
  const bool fused_combine =
      all_resident && resolved_decode_combine(params) == MlaDecodeCombine::kFused;
  // The cache as {576 columns, 64 tokens, pages, kv heads}; one box is a 64 × 64 column block.
  cuda::TensorMapBf16Spec kv_spec;
  kv_spec.base = params.kv_cache;
  kv_spec.rank = 4;
  kv_spec.dims[0] = kHeadDimQK;
  kv_spec.dims[1] = kPageSize;
  kv_spec.dims[2] = static_cast<uint64_t>(params.num_pages);
  kv_spec.dims[3] = static_cast<uint64_t>(params.num_heads_kv);
  kv_spec.strides_bytes[0] = static_cast<uint64_t>(params.kv_token_stride) * sizeof(bf16);
  kv_spec.strides_bytes[1] = static_cast<uint64_t>(params.kv_page_stride) * sizeof(bf16);
  kv_spec.strides_bytes[2] = static_cast<uint64_t>(params.kv_head_stride) * sizeof(bf16);
  kv_spec.box[0] = 64;
  kv_spec.box[1] = kPageSize;
  kv_spec.box[2] = 1;
  kv_spec.box[3] = 1;
  args.kv_tensor_map = cuda::make_tensor_map_bf16(kv_spec);
  const MlaDecodeSchedule schedule = resolved_decode_schedule(params);
  if (args.shape.rows_per_tile != 16 && schedule == MlaDecodeSchedule::kSeesawPairs) {
    // The pairs order's halves (it runs 32- and 64-row tiles; nothing else reads this map): the
    // same cache with the columns split into 64-column blocks, a box of four of them, the blocks'
    // dimension (stride 128 B) inserted after the tokens, pages and heads moved up one.
    cuda::TensorMapBf16Spec half = kv_spec;
    half.rank = 5;
    for (int d = 4; d >= 3; --d) {
      half.dims[d] = kv_spec.dims[d - 1];
      half.strides_bytes[d - 1] = kv_spec.strides_bytes[d - 2];
      half.box[d] = kv_spec.box[d - 1];
    }
    half.dims[0] = 64;
    half.dims[2] = kHeadDimQK / 64;
    half.strides_bytes[1] = 64 * sizeof(bf16);
    half.box[2] = 4;
    args.kv_half_tensor_map = cuda::make_tensor_map_bf16(half);
  }
  // kFast's seesaw copies 64-row query tiles by TMA where a tile is one box (the map is made only
  // for a launch that runs the seesaw: kBaseline's schedule resolves to the lockstep body).
  cuda::TensorMapBf16Spec q_spec;
  args.query_by_tma = args.shape.rows_per_tile == 64 && schedule != MlaDecodeSchedule::kLockstep &&
                      query_tma_from_environment() &&
                      query_tile_map_spec(params, args.heads_per_kv, &q_spec);
  if (args.query_by_tma) args.q_tensor_map = cuda::make_tensor_map_bf16(q_spec);
  mark_phase("split_kv", stream);
  if (args.shape.rows_per_tile == 16) {
    decode::launch_splitkv_mma<16>(args, fused_combine, stream);
  } else {
    // The plan's part count assumes the tile count of decode_launch_shape(); 64-row tiles match it.
    MLA_CHECK_EQ((args.shape.rows_per_kv_head + 63) / 64, args.shape.num_row_tiles);
    if (schedule == MlaDecodeSchedule::kLockstep) {
      decode::launch_splitkv_wgmma(args, fused_combine, stream);
    } else {
      // Tile-major needs the parts on the grid's y, at most 65,535 of them.
      args.tile_major_grid =
          !fused_combine && args.shape.num_parts <= 65535 && tile_major_from_environment();
      const decode::SeesawOrder order =
          schedule == MlaDecodeSchedule::kSeesawSFirst  ? decode::SeesawOrder::kSFirst
          : schedule == MlaDecodeSchedule::kSeesawPairs ? decode::SeesawOrder::kPairs
                                                        : decode::SeesawOrder::kPvFirst;
      if (pair_trace != nullptr) {
        decode::launch_splitkv_seesaw_pair_trace(args, stream);
      } else if (timeline != nullptr) {  // launch_mla_decode_with_timeline() checked the order
        decode::launch_splitkv_seesaw_timeline(args, order, stream);
      } else {
        decode::launch_splitkv_seesaw(args, fused_combine, order, stream);
      }
    }
  }
  if (!fused_combine) {
    mark_phase("combine", stream);
    if (timeline != nullptr)
      args.combine_timeline = timeline + decode_timeline_combine_word(grid_ctas, 0);
    decode::launch_combine_kernel(args, launched_combine_kind(params, fast), stream);
  }
}

}  // namespace

void launch_mla_decode(const MlaDecodeParams& params, cudaStream_t stream) {
  launch_decode(params, nullptr, nullptr, stream);
}

int64_t decode_timeline_split_ctas(const MlaDecodeParams& params) {
  return decode_grid_ctas(
      decode_launch_shape(params.seqlen_q, params.num_heads_q, params.num_heads_kv, params.num_sms),
      params.num_heads_kv);
}

int64_t decode_timeline_combine_ctas(const MlaDecodeParams& params) {
  const decode::CombineGrid grid = decode::combine_grid(
      params,
      decode_launch_shape(params.seqlen_q, params.num_heads_q, params.num_heads_kv, params.num_sms),
      launched_combine_kind(params, params.kernel == MlaDecodeKernel::kFast));
  return grid.x * grid.y;
}

int64_t mla_decode_timeline_words(const MlaDecodeParams& params) {
  return decode_timeline_combine_word(decode_timeline_split_ctas(params),
                                      decode_timeline_combine_ctas(params));
}

namespace {

// Whether a kFast launch runs the 16-row body (tiles of at most 16 rows; every wider tile runs a
// 64-row body).
bool runs_fast_16_row_body(const MlaDecodeParams& params) {
  return params.kernel == MlaDecodeKernel::kFast && params.num_heads_kv > 0 &&
         decode_launch_shape(params.seqlen_q, params.num_heads_q, params.num_heads_kv,
                             params.num_sms)
                 .rows_per_tile == 16;
}

// Whether a kFast launch runs the seesaw in `order` with the launched combine (what the
// diagnostic instantiations record).
bool runs_seesaw_launched(const MlaDecodeParams& params, MlaDecodeSchedule order) {
  return params.kernel == MlaDecodeKernel::kFast && params.num_heads_kv > 0 &&
         !runs_fast_16_row_body(params) && resolved_decode_schedule(params) == order &&
         resolved_decode_combine(params) != MlaDecodeCombine::kFused;
}

}  // namespace

bool decode_timeline_applies(const MlaDecodeParams& params) {
  return runs_fast_16_row_body(params) ||
         runs_seesaw_launched(params, MlaDecodeSchedule::kSeesawPairs) ||
         runs_seesaw_launched(params, MlaDecodeSchedule::kSeesawPvFirst);
}

void launch_mla_decode_with_timeline(const MlaDecodeParams& params, uint64_t* timeline,
                                     cudaStream_t stream) {
  require(timeline != nullptr, "timeline is null (allocate mla_decode_timeline_words() uint64)");
  require(decode_timeline_applies(params),
          "the timeline records kFast's 16-row body, or its seesaw's pairs or P·V-first order "
          "with the launched combine; this launch runs neither");
  launch_decode(params, timeline, nullptr, stream);
}

const char* decode_pair_trace_event(int warpgroup, int event) {
  // What each warpgroup has just done when it stamps (splitkv_seesaw.cuh, the pairs order's
  // chain): warpgroup 0 owns page a, warpgroup 1 page b, and their steps differ.
  static constexpr const char* kEvents[2][kDecodePairTraceEvents] = {
      {"pair start", "previous P·V done, half of page b freed", "S issued (page landed)", "S done",
       "P exponentiated (frame of page a)", "P and frame published", "own P·V issued",
       "own P·V done", "release of page a's half: its four warps past the barrier",
       "its half of page a freed (that half of page a + 2 issued)", "other's P and frame received",
       "O in the other's frame", "other's P·V issued"},
      {"pair start", "previous P·V done, half of page b freed", "other's S issued",
       "S issued (page landed)", "other's P and frame received", "other's P·V issued", "S done",
       "P exponentiated (frame of page b)", "P and frame published", "other's P·V done",
       "release of page a's half: its four warps past the barrier",
       "its half of page a freed (that half of page a + 2 issued)",
       "own P·V issued (after warpgroup 0's)"}};
  require(warpgroup >= 0 && warpgroup < 2 && event >= 0 && event < kDecodePairTraceEvents,
          fmt::format("no pair-trace event {} of warpgroup {}", event, warpgroup));
  return kEvents[warpgroup][event];
}

const char* decode_piece_trace_event(int event) {
  // Thread 0's steps of each piece (splitkv_seesaw.cuh, the pairs order's piece loop).
  static constexpr const char* kEvents[kDecodePieceTraceEvents] = {
      "piece start (first pages issued after it)", "queries in shared memory",
      "first page's first half landed", "warpgroup 0's last P·V done",
      "output or partial rows' copies issued"};
  require(event >= 0 && event < kDecodePieceTraceEvents,
          fmt::format("no piece-trace event {}", event));
  return kEvents[event];
}

bool decode_pair_trace_applies(const MlaDecodeParams& params) {
  return runs_seesaw_launched(params, MlaDecodeSchedule::kSeesawPairs);
}

int64_t decode_pair_trace_words(const MlaDecodeParams& params) {
  return decode_timeline_split_ctas(params) * kDecodePairTraceWords;
}

void launch_mla_decode_with_pair_trace(const MlaDecodeParams& params, uint64_t* trace,
                                       cudaStream_t stream, int piece) {
  require(trace != nullptr, "pair trace is null (allocate decode_pair_trace_words() uint64)");
  require(piece >= 0, fmt::format("pair trace: piece {} is negative", piece));
  require(decode_pair_trace_applies(params),
          "the pair trace records kFast's seesaw pairs order only (more than 16 query rows per kv "
          "head, schedule seesaw_pairs, launched combine)");
  launch_decode(params, nullptr, trace, stream, piece);
}

}  // namespace mla::kernels
