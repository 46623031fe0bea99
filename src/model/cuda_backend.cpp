// The CUDA backend (see cuda_backend.h): each Backend op as a kernel of kernels/ or a cuBLAS call.
#include "model/cuda_backend.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/dtypes.h"
#include "core/error.h"
#include "cuda/check.h"
#include "mla/kernels/fill.h"
#include "mla/kernels/moe.h"
#include "mla/kernels/ops.h"
#include "mla/kernels/prefill_attention.h"
#include "mla/kernels/sampling.h"
#include "mla/kernels/scalar_type.h"
#include "mla/kernels/scatter_rows.h"

namespace mla::model {
namespace {

using kernels::ScalarType;

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

ScalarType scalar_type(const Tensor& t, const char* what) {
  if (t.dtype == DType::kF32) return ScalarType::kF32;
  if (t.dtype == DType::kBF16) return ScalarType::kBF16;
  throw_error("cuda backend: {} must be f32 or bf16, got {}", what, describe(t));
}

// A tensor seen as [rows, cols]: cols the innermost dimension, the outer ones collapsed (they
// must be collapsible: stride[d] = stride[d + 1] · shape[d + 1]).
struct Rows {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t row_stride = 0;
};

Rows as_rows(const Tensor& t, const char* what) {
  MLA_CHECK(t.rank >= 1);
  Rows r;
  r.cols = t.shape[t.rank - 1];
  if (t.rank == 1) {
    r.row_stride = r.cols;
    return r;
  }
  r.row_stride = t.stride[t.rank - 2];
  r.rows = t.shape[t.rank - 2];
  for (int d = t.rank - 3; d >= 0; --d) {
    if (t.shape[d] != 1 && t.stride[d] != t.stride[d + 1] * t.shape[d + 1])
      throw_error("cuda backend: {} {} cannot be seen as rows", what, describe(t));
    r.rows *= t.shape[d];
  }
  return r;
}

kernels::Strided2D strided2d(const Tensor& t, const char* what) {
  const Rows r = as_rows(t, what);
  return kernels::Strided2D{t.data, scalar_type(t, what), r.row_stride};
}

// A tensor of rank <= 3 (or 4 with a leading 1) as [d0, d1, d2] with strides.
struct Dims3 {
  int64_t d[3] = {1, 1, 1};
  int64_t stride0 = 0, stride1 = 0;
};

Dims3 as_dims3(const Tensor& t, const char* what) {
  Tensor v = t;
  while (v.rank > 3) {
    if (v.shape[0] != 1)
      throw_error("cuda backend: {} {} has more than 3 dimensions", what, describe(t));
    for (int d = 0; d + 1 < v.rank; ++d) {
      v.shape[d] = v.shape[d + 1];
      v.stride[d] = v.stride[d + 1];
    }
    --v.rank;
  }
  Dims3 out;
  const int pad = 3 - v.rank;
  for (int d = 0; d < v.rank; ++d) out.d[pad + d] = v.shape[d];
  int64_t strides[3] = {0, 0, 1};
  for (int d = 0; d < v.rank; ++d) strides[pad + d] = v.stride[d];
  if (v.rank >= 1 && v.stride[v.rank - 1] != 1 && v.shape[v.rank - 1] > 1)
    throw_error("cuda backend: {} {} has a non-contiguous innermost dimension", what, describe(t));
  out.stride0 = strides[0];
  out.stride1 = strides[1];
  return out;
}

kernels::Strided3D strided3d(const Tensor& t, const Dims3& dims, const char* what) {
  return kernels::Strided3D{t.data, scalar_type(t, what), dims.stride0, dims.stride1};
}

cudaDataType_t cuda_type(const Tensor& t, const char* what) {
  if (t.dtype == DType::kBF16) return CUDA_R_16BF;
  if (t.dtype == DType::kF32) return CUDA_R_32F;
  throw_error("cuda backend: {} must be f32 or bf16, got {}", what, describe(t));
}

size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

CudaBackend::CudaBackend(const CudaBackendOptions& options) : options_(options) {
  if (cuda::device_count() == 0)
    throw_error("cuda backend: no CUDA GPU found (use --backend cpu on machines without one)");
  device_ = cuda::current_device_info();
  if (device_.compute_major != 9)
    throw_error("cuda backend: needs an sm_90 GPU (H100/H200), found {}", cuda::describe(device_));
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MLA_CUDA_CHECK(cudaEventCreateWithFlags(&staging_done_, cudaEventDisableTiming));
  MLA_CUBLAS_CHECK(cublasCreate(&cublas_));
  MLA_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // A fixed cuBLAS workspace: cuBLAS then allocates nothing while a graph is being captured.
  cublas_workspace_ = cuda::DeviceBuffer<char>(kCublasWorkspaceBytes);
  MLA_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.data(), kCublasWorkspaceBytes));
  if (options_.tuned_gemm)  // same stream, so it may share cuBLAS's workspace
    gemm_ = std::make_unique<cuda::TunedGemm>(stream_, cublas_workspace_.data(),
                                              kCublasWorkspaceBytes, device_.l2_cache_bytes);
  arena_ = cuda::DeviceArena(options_.arena_bytes);
}

CudaBackend::~CudaBackend() {
  for (auto& [id, graph] : graphs_) cudaGraphExecDestroy(graph);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (staging_pinned_ != nullptr) cudaFreeHost(staging_pinned_);
  if (staging_done_ != nullptr) cudaEventDestroy(staging_done_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  for (cudaEvent_t event : all_events_) cudaEventDestroy(event);
}

void CudaBackend::resize_arena(size_t bytes) {
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& [id, graph] : graphs_) cudaGraphExecDestroy(graph);
  graphs_.clear();
  arena_ = cuda::DeviceArena();
  arena_ = cuda::DeviceArena(bytes);
}

// --- Op profiling.

void CudaBackend::set_op_profiling(bool on) {
  profiling_ = on;
}

cudaEvent_t CudaBackend::pooled_event() {
  if (!free_events_.empty()) {
    const cudaEvent_t event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  MLA_CUDA_CHECK(cudaEventCreate(&event));
  all_events_.push_back(event);
  return event;
}

size_t CudaBackend::begin_op_record(std::string name, bool phase) {
  // An op called inside another op (none today) counts as a phase of the outer one.
  const bool nested = !phase && profile_depth_ > 0;
  OpRecord record;
  record.name = nested ? phase_recorder_.op + "/" + name : std::move(name);
  record.phase = phase || nested;
  record.start = pooled_event();
  record.end = pooled_event();
  MLA_CUDA_CHECK(cudaEventRecord(record.start, stream_));
  op_records_.push_back(std::move(record));
  const size_t index = op_records_.size() - 1;
  if (!phase && profile_depth_++ == 0) {
    phase_recorder_.backend = this;
    phase_recorder_.op = op_records_[index].name;
    kernels::set_phase_listener(&phase_recorder_);
  }
  return index;
}

// From OpScope's destructor, so it never throws: a pair whose end was not recorded is dropped
// when folding.
void CudaBackend::end_op_record(size_t record) {
  if (--profile_depth_ == 0) {
    phase_recorder_.close();
    kernels::set_phase_listener(nullptr);
  }
  cudaEventRecord(op_records_[record].end, stream_);
}

void CudaBackend::PhaseRecorder::phase(const char* name, cudaStream_t) {
  close();
  open_record = backend->begin_op_record(op + "/" + name, /*phase=*/true);
  has_open = true;
}

void CudaBackend::PhaseRecorder::close() {
  if (!has_open) return;
  cudaEventRecord(backend->op_records_[open_record].end, backend->stream_);
  has_open = false;
}

void CudaBackend::fold_op_records() {
  for (const OpRecord& record : op_records_) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, record.start, record.end) == cudaSuccess) {
      OpProfileEntry& entry = op_totals_[record.name];
      entry.name = record.name;
      entry.phase = record.phase;
      ++entry.calls;
      entry.total_us += 1e3 * ms;
    } else {
      cudaGetLastError();  // not a sticky error: clear it
    }
    free_events_.push_back(record.start);
    free_events_.push_back(record.end);
  }
  op_records_.clear();
}

std::vector<OpProfileEntry> CudaBackend::op_profile() {
  MLA_CHECK(!capturing_ && profile_depth_ == 0);
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  fold_op_records();
  std::vector<OpProfileEntry> entries;
  for (const auto& [name, entry] : op_totals_) entries.push_back(entry);
  std::stable_sort(
      entries.begin(), entries.end(),
      [](const OpProfileEntry& a, const OpProfileEntry& b) { return a.total_us > b.total_us; });
  return entries;
}

void CudaBackend::reset_op_profile() {
  MLA_CHECK(!capturing_ && profile_depth_ == 0);
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  fold_op_records();  // gives the events back to the pool
  op_totals_.clear();
}

// --- Memory.

// A device allocation of its own (not the arena), owned by the returned tensor and its views.
Tensor CudaBackend::owned_tensor(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor tensor = make_contiguous_view(nullptr, dtype, shape);
  const size_t bytes = static_cast<size_t>(tensor.numel()) * dtype_size(dtype);
  MLA_CUDA_CHECK(cudaMalloc(&tensor.data, std::max<size_t>(bytes, 1)));
  tensor.storage = std::shared_ptr<void>(tensor.data, [](void* p) { cudaFree(p); });
  return tensor;
}

Tensor CudaBackend::allocate(DType dtype, std::initializer_list<int64_t> shape) {
  if (in_step_) {
    Tensor tensor = make_contiguous_view(nullptr, dtype, shape);
    const size_t bytes = static_cast<size_t>(tensor.numel()) * dtype_size(dtype);
    tensor.data = arena_.allocate(std::max<size_t>(bytes, 1), "a step tensor");
    return tensor;
  }
  // Outside a step: long-lived (a latent cache).
  Tensor tensor = owned_tensor(dtype, shape);
  stats_.cache_bytes += static_cast<size_t>(tensor.numel()) * dtype_size(dtype);
  return tensor;
}

Tensor CudaBackend::upload_weight(const std::string& name, std::vector<float> values,
                                  std::initializer_list<int64_t> shape) {
  // The MoE correction bias stays fp32 (it decides ties between experts); all else is bf16.
  const bool keep_f32 = name.find("e_score_correction_bias") != std::string::npos;
  Tensor tensor = owned_tensor(keep_f32 ? DType::kF32 : DType::kBF16, shape);
  MLA_CHECK_EQ(static_cast<int64_t>(values.size()), tensor.numel());
  const size_t bytes = values.size() * dtype_size(tensor.dtype);
  // On the backend's stream, waited for: stream_ does not synchronise with the legacy default
  // stream, and a plain cudaMemcpy from pageable memory may return before its DMA lands, so a
  // kernel on stream_ could read the tail of the tensor before it arrived (the likely cause of
  // one failed run of CudaBackendOps.EveryOpMatchesTheCpuBackend on the H200, 2026-11-30).
  std::vector<bf16> converted;
  const void* source = values.data();
  if (!keep_f32) {
    converted.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) converted[i] = float_to_bf16(values[i]);
    source = converted.data();
  }
  MLA_CUDA_CHECK(cudaMemcpyAsync(tensor.data, source, bytes, cudaMemcpyHostToDevice, stream_));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  stats_.weight_bytes += bytes;
  return tensor;
}

Tensor CudaBackend::random_weight(const std::string& name, std::initializer_list<int64_t> shape,
                                  uint64_t seed, float stddev) {
  Tensor tensor = owned_tensor(DType::kBF16, shape);
  kernels::RandomFillSpec spec;
  spec.seed = seed;
  spec.stddev = stddev;
  spec.clip = 4.0f * stddev;
  kernels::launch_fill_random_bf16(tensor.as<bf16>(), static_cast<size_t>(tensor.numel()), spec,
                                   stream_);
  stats_.weight_bytes += static_cast<size_t>(tensor.numel()) * sizeof(bf16);
  return tensor;
}

Tensor CudaBackend::new_weight(DType dtype, int64_t rows, int64_t cols) {
  Tensor tensor = owned_tensor(dtype, {rows, cols});
  stats_.weight_bytes += static_cast<size_t>(tensor.numel()) * dtype_size(tensor.dtype);
  return tensor;
}

void CudaBackend::release_weight(Tensor& weight) {
  if (weight.storage.use_count() == 1) {
    // A repack may still be reading it on the stream.
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    stats_.weight_bytes -= static_cast<size_t>(weight.numel()) * dtype_size(weight.dtype);
  }
  weight = Tensor{};
}

void CudaBackend::fill(Tensor& dst, float value) {
  // One row of the value on the device, broadcast (stride 0) over the destination's rows.
  const Dims3 dims = as_dims3(dst, "fill destination");
  const std::vector<float> row(dims.d[2], value);
  cuda::DeviceBuffer<float> row_device(row.size());
  row_device.copy_from_host(row, stream_);
  kernels::launch_copy(kernels::Strided3D{row_device.data(), ScalarType::kF32, 0, 0},
                       strided3d(dst, dims, "fill destination"), dims.d[0], dims.d[1], dims.d[2],
                       stream_);
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(const Tensor& src, float* dst) {
  const OpScope scope = profile_scope("copy_to_host");
  const Dims3 dims = as_dims3(src, "copy_to_host source");
  const int64_t count = dims.d[0] * dims.d[1] * dims.d[2];
  if (count == 0) return;
  // Densify and convert to fp32 on the device, then one copy back.
  // A kept staging buffer: no cudaMalloc/cudaFree (an implicit device sync) per call.
  if (host_copy_scratch_.size() < static_cast<size_t>(count))
    host_copy_scratch_ = cuda::DeviceBuffer<float>(count);
  float* dense = host_copy_scratch_.data();
  kernels::launch_copy(
      strided3d(src, dims, "copy_to_host source"),
      kernels::Strided3D{dense, ScalarType::kF32, dims.d[1] * dims.d[2], dims.d[2]}, dims.d[0],
      dims.d[1], dims.d[2], stream_);
  MLA_CUDA_CHECK(
      cudaMemcpyAsync(dst, dense, count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// --- The step.

void CudaBackend::begin_step(const StepPlan& plan) {
  const OpScope scope = profile_scope("begin_step");
  MLA_CHECK(!capturing_);
  // The previous upload must have left the pinned buffer before it is rewritten.
  MLA_CUDA_CHECK(cudaEventSynchronize(staging_done_));
  arena_.reset();
  step_data_.clear();
  decode_workspace_ = nullptr;
  decode_planned_heads_ = 0;
  plan_ = &plan;

  // Every member the ops will ask for, laid out in one buffer and uploaded in one copy.
  struct Section {
    const void* key;
    const void* data;
    size_t bytes;
  };
  std::vector<Section> sections;
  std::vector<std::vector<kernels::AttentionSpanDevice>> span_lists;
  auto add = [&](const auto& vec) {
    sections.push_back({&vec, vec.data(), vec.size() * sizeof(vec[0])});
  };
  auto add_spans = [&](const std::vector<AttentionSpan>& spans) {
    std::vector<kernels::AttentionSpanDevice> device;
    for (const AttentionSpan& s : spans)
      device.push_back({s.q_begin, s.q_count, s.k_begin, s.k_count, s.causal ? 1 : 0});
    span_lists.push_back(std::move(device));
    sections.push_back({&spans, span_lists.back().data(),
                        span_lists.back().size() * sizeof(kernels::AttentionSpanDevice)});
  };
  span_lists.reserve(1 + plan.context_chunks.size());
  add(plan.token_ids);
  add(plan.positions);
  add(plan.slot_mapping);
  add(plan.decode_seqlens);
  add(plan.decode_block_table);
  add(plan.logit_rows);
  add_spans(plan.prefill_spans);
  for (const ContextChunk& chunk : plan.context_chunks) {
    add(chunk.slots);
    add_spans(chunk.spans);
  }
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const Section& s : sections) {
    offsets.push_back(total);
    total = align_up(total + s.bytes, 16);
  }
  total = std::max<size_t>(total, 16);
  if (total > staging_pinned_bytes_) {
    if (staging_pinned_ != nullptr) MLA_CUDA_CHECK(cudaFreeHost(staging_pinned_));
    staging_pinned_bytes_ = std::max(total, 2 * staging_pinned_bytes_);
    MLA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&staging_pinned_), staging_pinned_bytes_,
                                 cudaHostAllocDefault));
  }
  char* device = static_cast<char*>(arena_.allocate(total, "the step's metadata"));
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].bytes > 0)
      std::memcpy(staging_pinned_ + offsets[i], sections[i].data, sections[i].bytes);
    step_data_[sections[i].key] = device + offsets[i];
  }
  MLA_CUDA_CHECK(cudaMemcpyAsync(device, staging_pinned_, total, cudaMemcpyHostToDevice, stream_));
  MLA_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
  decode_seqlens_ = static_cast<const int32_t*>(step_data_.at(&plan.decode_seqlens));
  decode_block_table_ = static_cast<const int32_t*>(step_data_.at(&plan.decode_block_table));
  // The decode op's workspace (plan and partials), before any layer's scratch; the plan itself is
  // computed by plan_decode(), the first op of the step, so a step graph records it.
  if (plan.num_decode_tokens > 0 && plan.decode_num_heads > 0) {
    decode_workspace_bytes_ = kernels::mla_decode_workspace_size(
        plan.num_decode_tokens, 1, plan.decode_num_heads, 1, device_.num_sms);
    decode_workspace_ = arena_.allocate(decode_workspace_bytes_, "the decode plan and partials");
    decode_planned_heads_ = plan.decode_num_heads;
  }
  in_step_ = true;
}

void CudaBackend::plan_decode() {
  const OpScope scope = profile_scope("plan_decode");
  if (decode_workspace_ == nullptr) return;
  // From the device seqlens: inside a step graph, a replay plans from the seqlens begin_step
  // has just uploaded. The plan also zeroes kFast's fused-combine counters.
  kernels::MlaDecodePlanParams decode_plan;
  decode_plan.seqlens = decode_seqlens_;
  decode_plan.batch = plan_->num_decode_tokens;
  decode_plan.seqlen_q = 1;
  decode_plan.num_heads_q = decode_planned_heads_;
  decode_plan.num_heads_kv = 1;
  decode_plan.num_sms = device_.num_sms;
  decode_plan.max_pages_per_seq = plan_->decode_max_pages;
  decode_plan.workspace = decode_workspace_;
  decode_plan.workspace_bytes = decode_workspace_bytes_;
  kernels::launch_mla_decode_plan(decode_plan, stream_);
}

void CudaBackend::end_step() {
  in_step_ = false;
}

const void* CudaBackend::step_data(const void* host_member, const char* what) const {
  const auto it = step_data_.find(host_member);
  if (it == step_data_.end())
    throw_error(
        "cuda backend: {} is not a member of the step's plan (ops take plan members by "
        "reference; call begin_step first)",
        what);
  return it->second;
}

bool CudaBackend::replay_step_graph(int graph_id) {
  const auto it = graphs_.find(graph_id);
  if (it == graphs_.end()) return false;
  const OpScope scope = profile_scope("replay_step_graph");
  MLA_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  ++stats_.graph_replays;
  return true;
}

void CudaBackend::begin_graph_capture() {
  MLA_CHECK(in_step_ && !capturing_);
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  cuda::set_thread_capturing(true);
}

int CudaBackend::end_graph_capture() {
  MLA_CHECK(capturing_);
  capturing_ = false;
  cuda::set_thread_capturing(false);
  cudaGraph_t graph = nullptr;
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MLA_CUDA_CHECK(status);
  const int id = next_graph_id_++;
  graphs_[id] = exec;
  ++stats_.graphs_captured;
  MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  return id;
}

void CudaBackend::abort_graph_capture() {
  if (!capturing_) return;
  capturing_ = false;
  cuda::set_thread_capturing(false);
  // The capture may already be invalidated by the error that got us here: end it whatever its
  // state, drop what it recorded, and clear the error it left so the next call does not see it.
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr)
    cudaGraphDestroy(graph);
  cudaGetLastError();
}

// --- Dense ops.

Tensor CudaBackend::bf16_input(const Tensor& x) {
  if (x.dtype == DType::kBF16) return x;
  const Dims3 dims = as_dims3(x, "GEMM input");
  Tensor converted = allocate(DType::kBF16, {dims.d[0] * dims.d[1], dims.d[2]});
  kernels::launch_copy(
      strided3d(x, dims, "GEMM input"),
      kernels::Strided3D{converted.data, ScalarType::kBF16, dims.d[1] * dims.d[2], dims.d[2]},
      dims.d[0], dims.d[1], dims.d[2], stream_);
  return converted.reshape({dims.d[0] * dims.d[1], dims.d[2]});
}

void CudaBackend::embedding(const Tensor& table, Tensor& out) {
  const OpScope scope = profile_scope("embedding");
  MLA_CHECK(table.dtype == DType::kBF16 && table.rank == 2 && table.is_contiguous());
  const Rows r = as_rows(out, "embedding output");
  MLA_CHECK_EQ(r.rows, static_cast<int64_t>(plan_->num_tokens));
  MLA_CHECK_EQ(r.cols, table.shape[1]);
  kernels::launch_embedding(table.as<bf16>(), table.shape[0], table.shape[1],
                            static_cast<const int32_t*>(step_data(&plan_->token_ids, "token ids")),
                            r.rows, strided2d(out, "embedding output"), stream_);
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const OpScope scope = profile_scope("rms_norm");
  const Rows r = as_rows(x, "rms_norm input");
  MLA_CHECK(weight.dtype == DType::kBF16 && weight.numel() == r.cols);
  kernels::launch_rms_norm(strided2d(x, "rms_norm input"), weight.as<bf16>(), r.rows, r.cols, eps,
                           strided2d(out, "rms_norm output"), stream_);
}

void CudaBackend::add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight,
                               float eps, Tensor& out) {
  const OpScope scope = profile_scope("add_rms_norm");
  MLA_CHECK(residual.dtype == DType::kF32);
  const Rows r = as_rows(residual, "residual");
  MLA_CHECK(weight.dtype == DType::kBF16 && weight.numel() == r.cols);
  kernels::launch_add_rms_norm(residual.as<float>(), r.row_stride,
                               strided2d(delta, "residual delta"), weight.as<bf16>(), r.rows,
                               r.cols, eps, strided2d(out, "add_rms_norm output"), stream_);
}

void CudaBackend::linear(const Tensor& x_in, const Tensor& weight, Tensor& out) {
  const OpScope scope = profile_scope("linear");
  const Tensor x = bf16_input(x_in);
  const Rows rx = as_rows(x, "linear input");
  const Rows ro = as_rows(out, "linear output");
  MLA_CHECK(weight.dtype == DType::kBF16 && weight.rank == 2 && weight.is_contiguous());
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  MLA_CHECK_EQ(rx.cols, in_features);
  MLA_CHECK_EQ(ro.cols, out_features);
  MLA_CHECK_EQ(rx.rows, ro.rows);
  if (rx.rows == 0) return;
  if (gemm_ != nullptr) {
    cuda::GemmProblem problem;
    problem.m = rx.rows;
    problem.n = out_features;
    problem.k = in_features;
    problem.x_row_stride = rx.row_stride;
    problem.out_row_stride = ro.row_stride;
    problem.out_f32 = cuda_type(out, "linear output") == CUDA_R_32F;
    gemm_->run(problem, x.data, weight.data, out.data, /*may_tune=*/!capturing_);
    return;
  }
  // Row-major out [rows, N] = x [rows, K] · Wᵀ is column-major outᵀ [N, rows] = W(ᵀ) · xᵀ: W's
  // row-major [N, K] is a column-major K×N matrix used transposed.
  const float alpha = 1.0f, beta = 0.0f;
  MLA_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out_features),
                                static_cast<int>(rx.rows), static_cast<int>(in_features), &alpha,
                                weight.data, CUDA_R_16BF, static_cast<int>(in_features), x.data,
                                CUDA_R_16BF, static_cast<int>(rx.row_stride), &beta, out.data,
                                cuda_type(out, "linear output"), static_cast<int>(ro.row_stride),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::add(Tensor& x, const Tensor& y) {
  const OpScope scope = profile_scope("add");
  const Rows rx = as_rows(x, "add destination");
  const Rows ry = as_rows(y, "add operand");
  MLA_CHECK(rx.rows == ry.rows && rx.cols == ry.cols);
  kernels::launch_add(strided2d(x, "add destination"), strided2d(y, "add operand"), rx.rows,
                      rx.cols, stream_);
}

void CudaBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const OpScope scope = profile_scope("silu_mul");
  const Rows r = as_rows(gate, "silu_mul gate");
  kernels::launch_silu_mul(strided2d(gate, "silu_mul gate"), strided2d(up, "silu_mul up"), r.rows,
                           r.cols, strided2d(out, "silu_mul output"), stream_);
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  const OpScope scope = profile_scope("copy");
  const Dims3 ds = as_dims3(src, "copy source");
  const Dims3 dd = as_dims3(dst, "copy destination");
  for (int i = 0; i < 3; ++i) MLA_CHECK_EQ(ds.d[i], dd.d[i]);
  kernels::launch_copy(strided3d(src, ds, "copy source"), strided3d(dst, dd, "copy destination"),
                       dd.d[0], dd.d[1], dd.d[2], stream_);
}

void CudaBackend::gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) {
  const OpScope scope = profile_scope("gather_rows");
  const Rows r = as_rows(x, "gather_rows source");
  kernels::launch_gather_rows(strided2d(x, "gather_rows source"),
                              static_cast<const int32_t*>(step_data(&rows, "gather_rows rows")),
                              static_cast<int64_t>(rows.size()), r.cols,
                              strided2d(out, "gather_rows output"), stream_);
}

const float* CudaBackend::inv_freq_on_device(const RopeTable& rope) {
  auto it = inv_freq_.find(&rope);
  if (it == inv_freq_.end() || it->second.host != rope.inv_freq) {
    if (capturing_)
      throw_error(
          "cuda backend: RoPE table first seen while recording a step graph (run one "
          "eager step first)");
    DeviceCopy<float> copy{rope.inv_freq, cuda::DeviceBuffer<float>(rope.inv_freq.size())};
    copy.device.copy_from_host(rope.inv_freq, stream_);
    it = inv_freq_.insert_or_assign(&rope, std::move(copy)).first;
  }
  return it->second.device.data();
}

void CudaBackend::rope(const Tensor& x, const RopeTable& rope, int64_t first_token, Tensor& out) {
  const OpScope scope = profile_scope("rope");
  MLA_CHECK(x.rank == 2 || x.rank == 3);
  MLA_CHECK_EQ(out.rank, x.rank);
  for (int d = 0; d < x.rank; ++d) MLA_CHECK_EQ(out.shape[d], x.shape[d]);
  MLA_CHECK(first_token >= 0 && first_token + x.shape[0] <= plan_->num_tokens);
  const int rotary_dim = static_cast<int>(x.shape[x.rank - 1]);
  MLA_CHECK_EQ(static_cast<size_t>(rotary_dim), 2 * rope.inv_freq.size());
  MLA_CHECK(x.stride[x.rank - 1] == 1 && out.stride[out.rank - 1] == 1);
  const int64_t heads = x.rank == 3 ? x.shape[1] : 1;
  const kernels::Strided3D x_view{x.data, scalar_type(x, "rope input"), x.stride[0],
                                  x.rank == 3 ? x.stride[1] : 0};
  const kernels::Strided3D out_view{out.data, scalar_type(out, "rope output"), out.stride[0],
                                    out.rank == 3 ? out.stride[1] : 0};
  // The rows' positions start at the step's first_token (device pointer arithmetic).
  const int32_t* positions =
      static_cast<const int32_t*>(step_data(&plan_->positions, "positions")) + first_token;
  kernels::launch_rope(x_view, out_view, x.shape[0], heads, rotary_dim, positions,
                       inv_freq_on_device(rope), rope.cos_sin_scale, stream_);
}

// --- MLA.

void CudaBackend::write_latent_cache(const Tensor& latent, Tensor& cache) {
  const OpScope scope = profile_scope("write_latent_cache");
  MLA_CHECK(cache.dtype == DType::kBF16 && cache.rank == 3 && cache.is_contiguous());
  const Rows r = as_rows(latent, "latent");
  MLA_CHECK_EQ(r.cols, cache.shape[2]);
  kernels::ScatterRowsParams p;
  p.src = latent.data;
  p.src_type = scalar_type(latent, "latent");
  p.src_row_stride = r.row_stride;
  p.indices = static_cast<const int64_t*>(step_data(&plan_->slot_mapping, "slots"));
  p.rows = r.rows;
  p.cols = r.cols;
  p.dst = cache.as<bf16>();
  p.dst_row_stride = cache.stride[1];
  p.num_dst_rows = cache.shape[0] * cache.shape[1];
  kernels::launch_scatter_rows(p, stream_);
}

void CudaBackend::latent_cache_write(const Tensor& kv_a, const Tensor& norm_weight, float eps,
                                     const RopeTable& rope, Tensor& latent, Tensor& cache) {
  const OpScope scope = profile_scope("latent_cache_write");
  MLA_CHECK(cache.dtype == DType::kBF16 && cache.rank == 3 && cache.is_contiguous());
  const Rows r = as_rows(kv_a, "kv_a");
  kernels::LatentCacheWriteParams p{};
  p.kv_a = strided2d(kv_a, "kv_a");
  p.kv_norm_weight = norm_weight.as<bf16>();
  p.eps = eps;
  p.kv_lora_rank = static_cast<int>(norm_weight.numel());
  p.rope_dim = static_cast<int>(r.cols - norm_weight.numel());
  MLA_CHECK_EQ(static_cast<size_t>(p.rope_dim), 2 * rope.inv_freq.size());
  p.positions = static_cast<const int32_t*>(step_data(&plan_->positions, "positions"));
  p.inv_freq = inv_freq_on_device(rope);
  p.cos_sin_scale = rope.cos_sin_scale;
  p.slots = static_cast<const int64_t*>(step_data(&plan_->slot_mapping, "slots"));
  p.tokens = r.rows;
  p.latent_out = strided2d(latent, "latent");
  p.cache = cache.as<bf16>();
  p.cache_slot_stride = cache.stride[1];
  p.num_slots = cache.shape[0] * cache.shape[1];
  kernels::launch_latent_cache_write(p, stream_);
}

void CudaBackend::gather_latent_cache(const Tensor& cache, const std::vector<int64_t>& slots,
                                      Tensor& out) {
  const OpScope scope = profile_scope("gather_latent_cache");
  MLA_CHECK(cache.dtype == DType::kBF16 && cache.rank == 3 && cache.is_contiguous());
  kernels::launch_gather_latent_cache(
      cache.as<bf16>(), cache.stride[1], cache.shape[2],
      static_cast<const int64_t*>(step_data(&slots, "context slots")),
      static_cast<int64_t>(slots.size()), strided2d(out, "gathered latents"), stream_);
}

void CudaBackend::head_matmul(const Tensor& a_in, const Tensor& b, bool transpose_b, Tensor& out) {
  const OpScope scope = profile_scope("head_matmul");
  MLA_CHECK(a_in.rank == 3 && b.rank == 3 && out.rank == 3);
  MLA_CHECK(a_in.dtype == DType::kBF16 && b.dtype == DType::kBF16);
  const Tensor& a = a_in;
  const int64_t tokens = a.shape[0], heads = a.shape[1], k = a.shape[2];
  const int64_t n = out.shape[2];
  MLA_CHECK_EQ(b.shape[0], heads);
  MLA_CHECK_EQ(transpose_b ? b.shape[2] : b.shape[1], k);
  MLA_CHECK_EQ(transpose_b ? b.shape[1] : b.shape[2], n);
  MLA_CHECK(out.shape[0] == tokens && out.shape[1] == heads);
  if (tokens == 0) return;
  MLA_CHECK(a.stride[2] == 1 && b.stride[2] == 1 && out.stride[2] == 1);
  if (gemm_ != nullptr) {  // heads are the batch, with the views' head strides
    cuda::GemmProblem problem;
    problem.m = tokens;
    problem.n = n;
    problem.k = k;
    problem.x_row_stride = a.stride[0];
    problem.out_row_stride = out.stride[0];
    problem.out_f32 = cuda_type(out, "head_matmul output") == CUDA_R_32F;
    problem.w_nk = transpose_b;
    problem.w_row_stride = b.stride[1];
    problem.batch = heads;
    problem.x_batch_stride = a.stride[1];
    problem.w_batch_stride = b.stride[0];
    problem.out_batch_stride = out.stride[1];
    gemm_->run(problem, a.data, b.data, out.data, /*may_tune=*/!capturing_);
    return;
  }
  // Per head, row-major out_h [t, n] = a_h [t, k] · B_h: column-major out_hᵀ [n, t] = B_hᵀ · a_hᵀ.
  // B_h row-major [k, n] is column-major n×k (no transpose); row-major [n, k] is column-major
  // k×n, used transposed. Heads are the batch, with the views' head strides.
  const float alpha = 1.0f, beta = 0.0f;
  MLA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(tokens), static_cast<int>(k), &alpha, b.data, CUDA_R_16BF,
      static_cast<int>(b.stride[1]), b.stride[0], a.data, CUDA_R_16BF,
      static_cast<int>(a.stride[0]), a.stride[1], &beta, out.data,
      cuda_type(out, "head_matmul output"), static_cast<int>(out.stride[0]), out.stride[1],
      static_cast<int>(heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::mla_decode(const Tensor& q, const Tensor& cache, int head_dim_v,
                             float softmax_scale, Tensor& out, Tensor& lse) {
  const OpScope scope = profile_scope("mla_decode");
  MLA_CHECK(q.dtype == DType::kBF16 && out.dtype == DType::kBF16 && lse.dtype == DType::kF32);
  MLA_CHECK(cache.dtype == DType::kBF16 && cache.rank == 3 && cache.is_contiguous());
  MLA_CHECK(q.rank == 3 && out.rank == 3 && lse.is_contiguous());
  const int batch = static_cast<int>(q.shape[0]);
  const int heads = static_cast<int>(q.shape[1]);
  MLA_CHECK_EQ(batch, plan_->num_decode_tokens);
  if (batch == 0) return;
  // The plan was made by plan_decode() at the start of the step and serves every layer.
  MLA_CHECK(decode_workspace_ != nullptr);
  MLA_CHECK_EQ(heads, decode_planned_heads_);
  kernels::MlaDecodeParams p;
  p.batch = batch;
  p.seqlen_q = 1;
  p.num_heads_q = heads;
  p.num_heads_kv = 1;
  p.head_dim_qk = static_cast<int>(q.shape[2]);
  p.head_dim_v = head_dim_v;
  p.page_size = static_cast<int>(cache.shape[1]);
  p.num_pages = static_cast<int>(cache.shape[0]);
  p.max_pages_per_seq = plan_->decode_max_pages;
  p.softmax_scale = softmax_scale;
  p.causal = false;
  p.q = q.as<bf16>();
  p.q_batch_stride = q.stride[0];
  p.q_seq_stride = q.stride[0];
  p.q_head_stride = q.stride[1];
  p.kv_cache = cache.as<bf16>();
  p.kv_page_stride = cache.stride[0];
  p.kv_token_stride = cache.stride[1];
  p.kv_head_stride = cache.shape[2];
  p.block_table = decode_block_table_;
  p.block_table_batch_stride = plan_->decode_max_pages;
  p.seqlens = decode_seqlens_;
  p.out = out.as<bf16>();
  p.out_batch_stride = out.stride[0];
  p.out_seq_stride = out.stride[0];
  p.out_head_stride = out.stride[1];
  p.lse = lse.as<float>();
  p.num_sms = device_.num_sms;
  p.workspace = decode_workspace_;
  p.workspace_bytes = decode_workspace_bytes_;
  p.kernel = options_.decode_kernel;
  p.combine = options_.decode_combine;
  kernels::launch_mla_decode(p, stream_);
}

void CudaBackend::attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                            const std::vector<AttentionSpan>& spans, float softmax_scale,
                            Tensor& out, Tensor& lse) {
  const OpScope scope = profile_scope("attention");
  MLA_CHECK(q_in.rank == 3 && k_in.rank == 3 && v_in.rank == 3 && out.rank == 3);
  MLA_CHECK(q_in.dtype == DType::kBF16 && k_in.dtype == DType::kBF16 &&
            v_in.dtype == DType::kBF16 && out.dtype == DType::kBF16 && lse.dtype == DType::kF32);
  kernels::PrefillAttentionParams p{};
  p.num_q_rows = q_in.shape[0];
  p.num_k_rows = k_in.shape[0];
  p.num_heads = static_cast<int>(q_in.shape[1]);
  p.head_dim_qk = static_cast<int>(q_in.shape[2]);
  p.head_dim_v = static_cast<int>(v_in.shape[2]);
  p.softmax_scale = softmax_scale;
  p.q = q_in.as<bf16>();
  p.q_row_stride = q_in.stride[0];
  p.q_head_stride = q_in.stride[1];
  p.k = k_in.as<bf16>();
  p.k_row_stride = k_in.stride[0];
  p.k_head_stride = k_in.stride[1];
  p.v = v_in.as<bf16>();
  p.v_row_stride = v_in.stride[0];
  p.v_head_stride = v_in.stride[1];
  p.out = out.as<bf16>();
  p.out_row_stride = out.stride[0];
  p.out_head_stride = out.stride[1];
  p.lse = lse.as<float>();
  p.lse_row_stride = lse.stride[0];
  p.spans = static_cast<const kernels::AttentionSpanDevice*>(step_data(&spans, "attention spans"));
  p.num_spans = static_cast<int>(spans.size());
  p.max_span_q_count = 0;
  for (const AttentionSpan& s : spans) p.max_span_q_count = std::max(p.max_span_q_count, s.q_count);
  kernels::launch_prefill_attention(p, stream_);
}

void CudaBackend::merge_attention(Tensor& out, Tensor& lse, const Tensor& part_out,
                                  const Tensor& part_lse) {
  const OpScope scope = profile_scope("merge_attention");
  MLA_CHECK(out.rank == 3 && part_out.rank == 3 && lse.rank == 2 && part_lse.rank == 2);
  const Dims3 d_out = as_dims3(out, "merge output");
  const Dims3 d_part = as_dims3(part_out, "merge part");
  kernels::launch_merge_attention(strided3d(out, d_out, "merge output"), lse.as<float>(),
                                  lse.stride[0], strided3d(part_out, d_part, "merge part"),
                                  part_lse.as<float>(), part_lse.stride[0], out.shape[0],
                                  out.shape[1], out.shape[2], stream_);
}

// --- Sampling.

std::vector<RowSample> CudaBackend::sample(const Tensor& logits,
                                           std::span<const RowSampling> rows) {
  const OpScope scope = profile_scope("sample");
  MLA_CHECK(logits.dtype == DType::kF32 && logits.rank == 2);
  MLA_CHECK(!capturing_);
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t vocab = logits.shape[1];
  if (n == 0) return {};
  constexpr int kTop = 20;
  // The host side of the inputs: per-row parameters and, for rows with penalties, their context.
  std::vector<kernels::SamplingRowParams> params(n);
  std::vector<int64_t> offsets(n + 1, 0);
  std::vector<int32_t> context, prompt_lengths(n, 0), logit_rows(n);
  bool rows_in_order = true;
  for (int64_t i = 0; i < n; ++i) {
    const RowSampling& r = rows[i];
    MLA_CHECK(r.logit_row >= 0 && r.logit_row < logits.shape[0]);
    logit_rows[i] = r.logit_row;
    rows_in_order = rows_in_order && r.logit_row == i;
    kernels::SamplingRowParams& p = params[i];
    p = r.params;
    p.num_logprobs = std::min(p.num_logprobs, kTop);
    const bool penalised =
        p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (penalised) {
      context.insert(context.end(), r.prompt.begin(), r.prompt.end());
      context.insert(context.end(), r.generated.begin(), r.generated.end());
      prompt_lengths[i] = static_cast<int32_t>(r.prompt.size());
    }
    offsets[i + 1] = static_cast<int64_t>(context.size());
  }
  // One scratch buffer: [gathered logits][workspace][params][offsets][context][prompt lengths]
  // [logit rows][out tokens][out logprob][out top ids][out top logprobs].
  size_t offset = 0;
  auto reserve = [&offset](size_t bytes) {
    const size_t at = offset;
    offset = align_up(offset + bytes, 256);
    return at;
  };
  const size_t at_logits = rows_in_order ? 0 : reserve(n * vocab * sizeof(float));
  const size_t workspace_bytes = kernels::sampling_workspace_size(n, vocab);
  const size_t at_workspace = reserve(workspace_bytes);
  const size_t at_params = reserve(n * sizeof(kernels::SamplingRowParams));
  const size_t at_offsets = reserve((n + 1) * sizeof(int64_t));
  const size_t at_context = reserve(std::max<size_t>(context.size(), 1) * sizeof(int32_t));
  const size_t at_prompt = reserve(n * sizeof(int32_t));
  const size_t at_rows = reserve(n * sizeof(int32_t));
  const size_t at_tokens = reserve(n * sizeof(int32_t));
  const size_t at_logprob = reserve(n * sizeof(float));
  const size_t at_top_ids = reserve(n * kTop * sizeof(int32_t));
  const size_t at_top_logprobs = reserve(n * kTop * sizeof(float));
  if (sampling_scratch_.size() < offset) sampling_scratch_ = cuda::DeviceBuffer<char>(offset);
  char* base = sampling_scratch_.data();
  auto upload = [&](size_t at, const void* data, size_t bytes) {
    if (bytes > 0)
      MLA_CUDA_CHECK(cudaMemcpyAsync(base + at, data, bytes, cudaMemcpyHostToDevice, stream_));
  };
  upload(at_params, params.data(), n * sizeof(kernels::SamplingRowParams));
  upload(at_offsets, offsets.data(), (n + 1) * sizeof(int64_t));
  upload(at_context, context.data(), context.size() * sizeof(int32_t));
  upload(at_prompt, prompt_lengths.data(), n * sizeof(int32_t));
  upload(at_rows, logit_rows.data(), n * sizeof(int32_t));

  kernels::SamplingParams p;
  p.rows = n;
  p.vocab = vocab;
  p.logits = logits.as<float>();
  p.logits_row_stride = logits.stride[0];
  if (!rows_in_order) {  // several choices draw from one row: give each its own copy
    kernels::launch_gather_rows(kernels::Strided2D{logits.data, ScalarType::kF32, logits.stride[0]},
                                reinterpret_cast<const int32_t*>(base + at_rows), n, vocab,
                                kernels::Strided2D{base + at_logits, ScalarType::kF32, vocab},
                                stream_);
    p.logits = reinterpret_cast<const float*>(base + at_logits);
    p.logits_row_stride = vocab;
  }
  p.row_params = reinterpret_cast<const kernels::SamplingRowParams*>(base + at_params);
  p.context_tokens = reinterpret_cast<const int32_t*>(base + at_context);
  p.context_offsets = reinterpret_cast<const int64_t*>(base + at_offsets);
  p.prompt_lengths = reinterpret_cast<const int32_t*>(base + at_prompt);
  p.out_tokens = reinterpret_cast<int32_t*>(base + at_tokens);
  p.out_logprob = reinterpret_cast<float*>(base + at_logprob);
  p.out_top_ids = reinterpret_cast<int32_t*>(base + at_top_ids);
  p.out_top_logprobs = reinterpret_cast<float*>(base + at_top_logprobs);
  p.workspace = base + at_workspace;
  p.workspace_bytes = workspace_bytes;
  kernels::launch_sampling(p, stream_);

  std::vector<int32_t> tokens(n), top_ids(n * kTop);
  std::vector<float> logprob(n), top_logprobs(n * kTop);
  auto download = [&](void* dst, size_t at, size_t bytes) {
    MLA_CUDA_CHECK(cudaMemcpyAsync(dst, base + at, bytes, cudaMemcpyDeviceToHost, stream_));
  };
  download(tokens.data(), at_tokens, n * sizeof(int32_t));
  download(logprob.data(), at_logprob, n * sizeof(float));
  download(top_ids.data(), at_top_ids, n * kTop * sizeof(int32_t));
  download(top_logprobs.data(), at_top_logprobs, n * kTop * sizeof(float));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<RowSample> samples(n);
  for (int64_t i = 0; i < n; ++i) {
    samples[i].token = tokens[i];
    if (params[i].num_logprobs < 0) continue;
    samples[i].logprob = logprob[i];
    for (int j = 0; j < params[i].num_logprobs && top_ids[i * kTop + j] >= 0; ++j)
      samples[i].top.emplace_back(top_ids[i * kTop + j], top_logprobs[i * kTop + j]);
  }
  return samples;
}

// --- MoE.

void CudaBackend::moe_route(const Tensor& router_logits, const Tensor& correction_bias,
                            const ref::MoeRoutingParams& params, Tensor& expert_ids,
                            Tensor& expert_weights) {
  const OpScope scope = profile_scope("moe_route");
  MLA_CHECK(router_logits.dtype == DType::kF32 && router_logits.rank == 2);
  MLA_CHECK_EQ(router_logits.shape[1], params.num_experts);
  MLA_CHECK(expert_ids.dtype == DType::kI32 && expert_ids.is_contiguous());
  MLA_CHECK(expert_weights.dtype == DType::kF32 && expert_weights.is_contiguous());
  MLA_CHECK_EQ(expert_ids.shape[1], params.top_k + params.appended_experts);
  MLA_CHECK_EQ(expert_weights.shape[1], params.top_k + params.appended_experts);
  kernels::MoeRouteParams p{};
  p.num_experts = params.num_experts;
  p.top_k = params.top_k;
  p.n_group = params.n_group;
  p.topk_group = params.topk_group;
  p.scoring = params.scoring == ref::MoeScoring::kSoftmax ? kernels::MoeScoring::kSoftmax
                                                          : kernels::MoeScoring::kSigmoid;
  p.method = params.method == ref::MoeTopk::kGreedy ? kernels::MoeTopk::kGreedy
             : params.method == ref::MoeTopk::kGroupLimitedGreedy
                 ? kernels::MoeTopk::kGroupLimitedGreedy
                 : kernels::MoeTopk::kNoauxTc;
  p.normalize = params.normalize;
  p.routed_scaling_factor = params.routed_scaling_factor;
  p.scale_when_normalized = params.scale_when_normalized;
  p.appended_experts = params.appended_experts;
  const float* bias = nullptr;
  if (!correction_bias.empty()) {
    MLA_CHECK(correction_bias.dtype == DType::kF32);
    bias = correction_bias.as<float>();
  }
  kernels::launch_moe_route(router_logits.as<float>(), router_logits.stride[0], bias,
                            router_logits.shape[0], p, expert_ids.as<int32_t>(),
                            expert_weights.as<float>(), stream_);
}

void CudaBackend::moe_experts(const Tensor& x_in, const Tensor& expert_ids,
                              const Tensor& expert_weights, const ExpertWeights& experts,
                              bool accumulate, Tensor& out) {
  const OpScope scope = profile_scope("moe_experts");
  const Tensor x = bf16_input(x_in);
  const Rows rx = as_rows(x, "MoE input");
  const Rows ro = as_rows(out, "MoE output");
  const int num_experts = static_cast<int>(experts.gate_proj.size());
  MLA_CHECK(num_experts > 0);
  const int64_t intermediate = experts.gate_proj[0].shape[0];
  // The experts' matrices as device arrays of pointers, made once per layer.
  std::vector<const void*> host_pointers;
  for (const auto* list : {&experts.gate_proj, &experts.up_proj, &experts.down_proj})
    for (const Tensor& w : *list) {
      MLA_CHECK(w.dtype == DType::kBF16 && w.is_contiguous());
      host_pointers.push_back(w.data);
    }
  auto it = expert_pointers_.find(&experts);
  if (it == expert_pointers_.end() || it->second.host != host_pointers) {
    if (capturing_)
      throw_error(
          "cuda backend: MoE experts first seen while recording a step graph (run one "
          "eager step first)");
    DeviceCopy<const void*> copy{host_pointers,
                                 cuda::DeviceBuffer<const void*>(host_pointers.size())};
    copy.device.copy_from_host(host_pointers, stream_);
    it = expert_pointers_.insert_or_assign(&experts, std::move(copy)).first;
  }
  const auto* pointers = reinterpret_cast<const bf16* const*>(it->second.device.data());
  kernels::MoeExpertsParams p{};
  p.tokens = rx.rows;
  p.hidden = rx.cols;
  p.intermediate = intermediate;
  p.num_experts = num_experts;
  p.top_k = static_cast<int>(expert_ids.shape[1]);
  p.x = x.as<bf16>();
  p.x_row_stride = rx.row_stride;
  p.expert_ids = expert_ids.as<int32_t>();
  p.expert_weights = expert_weights.as<float>();
  p.gate_proj = pointers;
  p.up_proj = pointers + num_experts;
  p.down_proj = pointers + 2 * num_experts;
  p.out = out.data;
  p.out_type = scalar_type(out, "MoE output");
  p.out_row_stride = ro.row_stride;
  p.accumulate = accumulate;
  p.workspace_bytes =
      kernels::moe_experts_workspace_size(rx.rows, rx.cols, intermediate, num_experts, p.top_k);
  p.workspace = arena_.allocate(p.workspace_bytes, "the MoE workspace");
  kernels::launch_moe_experts(p, stream_);
}

}  // namespace mla::model
