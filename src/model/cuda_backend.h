// The CUDA backend: the Backend interface on one GPU (sm_90a), with the kernels of kernels/ and
// cuBLAS. Weights and the latent cache are bf16; activations between ops are bf16; the residual
// stream, router logits, LSEs and logits are fp32; every op accumulates in fp32.
//
// Memory: weights and caches are their own device allocations; everything a step allocates
// (activations, the step's metadata, the decode plan, MoE workspaces) comes from one DeviceArena
// reset at begin_step. So a step never calls the driver's allocator, and the same plan shape gets
// the same addresses, which is what makes step graphs (CUDA graphs, one per decode batch bucket)
// replayable. The one subtle thing: per-step host data (token ids, positions, slots, block tables,
// spans, gather lists) is uploaded in begin_step in one copy, and the ops find their device copy by
// the address of the StepPlan member they are handed (the model passes plan members by reference).
//
// Op profiling (set_op_profiling): every op of a step, plus copy_to_host, sample and
// replay_step_graph, records a pair of timing events on the stream around its work, by name; the
// kernel tier's multi-kernel launches add their phases (kernels/phase_marks.h) as nested entries
// named "op/phase" (mla_decode/split_kv, moe_experts/gate_up, ...). Ops are not recorded while a
// step graph is being captured (the events would become graph nodes): profiling is silently
// ignored there. Events come from a pool reused across steps; op_profile() synchronises the stream,
// folds the recorded pairs into per-name totals and returns the pool's events.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/arena.h"
#include "cuda/device.h"
#include "cuda/tuned_gemm.h"
#include "mla/kernels/mla_decode.h"
#include "mla/kernels/phase_marks.h"
#include "model/backend.h"

struct cublasContext;

namespace mla::model {

struct CudaBackendOptions {
  size_t arena_bytes = size_t(512) << 20;  // per-step memory (see the header comment)
  kernels::MlaDecodeKernel decode_kernel = kernels::MlaDecodeKernel::kFast;
  kernels::MlaDecodeCombine decode_combine = kernels::MlaDecodeCombine::kAuto;  // kFast's merge
  // linear and head_matmul through cuBLASLt with measured algorithm choice (cuda/tuned_gemm.h);
  // false: cuBLAS's default choice (cublasGemmEx / GemmStridedBatchedEx), for comparison.
  bool tuned_gemm = true;
};

// One name's totals since the last reset_op_profile(). A phase is nested inside an op (its time
// is part of the op's), so a step's time is the sum over entries that are not phases.
struct OpProfileEntry {
  std::string name;
  bool phase = false;
  int64_t calls = 0;
  double total_us = 0;
};

struct CudaBackendStats {
  size_t weight_bytes = 0;  // device bytes of every upload_weight / random_weight /
                            // concat_weight_rows, less released ones
  size_t cache_bytes = 0;   // device bytes of allocations outside steps (latent caches)
  int graphs_captured = 0;
  int64_t graph_replays = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  DType activation_dtype() const override { return DType::kBF16; }
  cudaStream_t stream() const { return stream_; }
  const cuda::DeviceInfo& device() const { return device_; }
  const CudaBackendStats& stats() const { return stats_; }
  // linear's algorithm tuning so far (all zero when options().tuned_gemm is off).
  cuda::TunedGemmStats gemm_stats() const {
    return gemm_ ? gemm_->stats() : cuda::TunedGemmStats{};
  }
  const cuda::DeviceArena& arena() const { return arena_; }
  // Replaces the per-step arena (memory planning sizes it after a profiling step). Drops every
  // recorded graph, which points into the old one.
  void resize_arena(size_t bytes);

  Tensor allocate(DType dtype, std::initializer_list<int64_t> shape) override;
  Tensor upload_weight(const std::string& name, std::vector<float> values,
                       std::initializer_list<int64_t> shape) override;
  // Filled on the device (kernels/fill.h: ≈ Normal(0, stddev) clipped at 4 stddev), bf16.
  Tensor random_weight(const std::string& name, std::initializer_list<int64_t> shape, uint64_t seed,
                       float stddev) override;
  void release_weight(Tensor& weight) override;
  Tensor new_weight(DType dtype, int64_t rows, int64_t cols) override;
  void fill(Tensor& dst, float value) override;
  void copy_to_host(const Tensor& src, float* dst) override;
  void begin_step(const StepPlan& plan) override;
  void end_step() override;
  void plan_decode() override;

  bool supports_step_graphs() const override { return true; }
  bool replay_step_graph(int graph_id) override;
  void begin_graph_capture() override;
  int end_graph_capture() override;
  void abort_graph_capture() override;
  size_t scratch_mark() override { return arena_.used(); }
  void scratch_release(size_t mark) override { arena_.rewind(mark); }

  // Op profiling (see the header comment). Turning it off keeps the totals; recording stops.
  void set_op_profiling(bool on);
  // Synchronises the stream; the totals by name, largest total first.
  std::vector<OpProfileEntry> op_profile();
  void reset_op_profile();

  void embedding(const Tensor& table, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& delta, const Tensor& weight, float eps,
                    Tensor& out) override;
  void linear(const Tensor& x, const Tensor& weight, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override;
  using Backend::rope;
  void rope(const Tensor& x, const RopeTable& rope, int64_t first_token, Tensor& out) override;

  void write_latent_cache(const Tensor& latent, Tensor& cache) override;
  void latent_cache_write(const Tensor& kv_a, const Tensor& norm_weight, float eps,
                          const RopeTable& rope, Tensor& latent, Tensor& cache) override;
  void gather_latent_cache(const Tensor& cache, const std::vector<int64_t>& slots,
                           Tensor& out) override;
  void head_matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) override;
  void mla_decode(const Tensor& q, const Tensor& cache, int head_dim_v, float softmax_scale,
                  Tensor& out, Tensor& lse) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const std::vector<AttentionSpan>& spans, float softmax_scale, Tensor& out,
                 Tensor& lse) override;
  void merge_attention(Tensor& out, Tensor& lse, const Tensor& part_out,
                       const Tensor& part_lse) override;

  bool samples_on_device() const override { return true; }
  std::vector<RowSample> sample(const Tensor& logits, std::span<const RowSampling> rows) override;

  void moe_route(const Tensor& router_logits, const Tensor& correction_bias,
                 const ref::MoeRoutingParams& params, Tensor& expert_ids,
                 Tensor& expert_weights) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   const ExpertWeights& experts, bool accumulate, Tensor& out) override;

 private:
  // Op profiling: an event pair per op (or phase) on the stream. An OpScope ends its record when
  // it goes out of scope; an empty one (profiling off, or a graph being captured) does nothing.
  class OpScope {
   public:
    OpScope() = default;
    OpScope(CudaBackend* backend, size_t record) : backend_(backend), record_(record) {}
    ~OpScope() {
      if (backend_ != nullptr) backend_->end_op_record(record_);
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    CudaBackend* backend_ = nullptr;
    size_t record_ = 0;
  };
  struct OpRecord {
    std::string name;
    bool phase = false;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  // The kernel tier's phase marks inside the op being profiled, as nested records.
  struct PhaseRecorder final : kernels::PhaseListener {
    CudaBackend* backend = nullptr;
    std::string op;          // the enclosing op's name
    size_t open_record = 0;  // the phase being timed, when has_open
    bool has_open = false;
    void phase(const char* name, cudaStream_t stream) override;
    void close();
  };
  OpScope profile_scope(const char* name) {
    if (!profiling_ || capturing_) return {};
    return OpScope(this, begin_op_record(name));
  }
  size_t begin_op_record(std::string name, bool phase = false);
  void end_op_record(size_t record);
  cudaEvent_t pooled_event();
  void fold_op_records();  // after a stream sync

  // The device copy of a StepPlan member uploaded by begin_step (by the member's address).
  const void* step_data(const void* host_member, const char* what) const;
  Tensor owned_tensor(DType dtype, std::initializer_list<int64_t> shape);
  const float* inv_freq_on_device(const RopeTable& rope);
  Tensor bf16_input(const Tensor& x);  // x itself when bf16, else a bf16 copy in the arena

  CudaBackendOptions options_;
  cuda::DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  cublasContext* cublas_ = nullptr;
  cuda::DeviceBuffer<char> cublas_workspace_;
  std::unique_ptr<cuda::TunedGemm> gemm_;  // linear, head_matmul (options_.tuned_gemm)
  cuda::DeviceArena arena_;
  CudaBackendStats stats_;

  // The step: its plan, the device copies of its members, the decode plan state.
  const StepPlan* plan_ = nullptr;
  bool in_step_ = false;
  std::unordered_map<const void*, const void*> step_data_;
  char* staging_pinned_ = nullptr;  // pinned copy source
  size_t staging_pinned_bytes_ = 0;
  cudaEvent_t staging_done_ = nullptr;
  const int32_t* decode_seqlens_ = nullptr;
  const int32_t* decode_block_table_ = nullptr;
  void* decode_workspace_ = nullptr;  // the step's decode plan and partials (begin_step)
  size_t decode_workspace_bytes_ = 0;
  int decode_planned_heads_ = 0;

  // Long-lived device data made on first use (the model's first, eager step), kept with the host
  // values they were made from: a table at a reused address is made again, never served stale.
  template <typename T>
  struct DeviceCopy {
    std::vector<T> host;
    cuda::DeviceBuffer<T> device;
  };
  std::unordered_map<const RopeTable*, DeviceCopy<float>> inv_freq_;
  std::unordered_map<const ExpertWeights*, DeviceCopy<const void*>> expert_pointers_;
  cuda::DeviceBuffer<float> host_copy_scratch_;  // copy_to_host's dense fp32 staging

  // Device sampling's scratch (gathered logits, the kernel's workspace, inputs and outputs),
  // grown as needed; sampling runs after the step, outside any graph.
  cuda::DeviceBuffer<char> sampling_scratch_;

  // Step graphs by id.
  std::map<int, cudaGraphExec_t> graphs_;
  int next_graph_id_ = 1;
  bool capturing_ = false;

  // Op profiling.
  bool profiling_ = false;
  int profile_depth_ = 0;  // open op records (phases are not counted)
  PhaseRecorder phase_recorder_;
  std::vector<OpRecord> op_records_;      // recorded, not yet folded
  std::vector<cudaEvent_t> free_events_;  // the pool
  std::vector<cudaEvent_t> all_events_;   // every event the pool made (destroyed at the end)
  std::map<std::string, OpProfileEntry> op_totals_;
};

}  // namespace mla::model
