// FlashMlaSameRun with FlashMLA built in (MLA_FLASHMLA_DIR): our problem in FlashMLA's parameter
// structs, then its published entry points, called as its own PyTorch binding calls them
// (csrc/api/dense_decode.h at 9241ae3: the query viewed as [b, s_q·h_q / h_kv, h_kv, 576], the
// output as [b, h_kv, s_q·h_q / h_kv, 512], one SM part per 64 rows of a kv head and SM). With
// h_kv = 1 those views are our layouts' memory as it is, so nothing is copied.
#include "bench/flashmla_same_run.h"

#include <cmath>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "mla/kernels/mla_decode.h"
// FlashMLA's headers (from MLA_FLASHMLA_DIR/csrc).
#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

namespace mla::bench {

struct FlashMlaSameRun::State {
  DenseAttnDecodeParams params{};
  CombineParams combine{};
  cuda::DeviceBuffer<bf16> out;
  cuda::DeviceBuffer<float> lse;
  cuda::DeviceBuffer<int32_t> metadata;  // num_sm_parts DecodingSchedMeta
  cuda::DeviceBuffer<int32_t> num_splits;
  cuda::DeviceBuffer<float> lse_accum;
  cuda::DeviceBuffer<float> out_accum;
};

bool FlashMlaSameRun::available() {
  return true;
}

FlashMlaSameRun::FlashMlaSameRun(const FlashMlaProblem& problem, cudaStream_t stream)
    : state_(std::make_unique<State>()) {
  constexpr int kHeadsKv = 1;
  constexpr int kDimQK = kernels::kHeadDimQK;
  constexpr int kDimV = kernels::kHeadDimV;
  const int b = problem.batch;
  const int s_q = problem.seqlen_q;
  const int h_q = problem.num_heads_q;
  const int rows = s_q * h_q / kHeadsKv;  // FlashMLA's q_seq_per_hk
  const int num_sm_parts = std::max(problem.num_sms / kHeadsKv / ((rows + 63) / 64), 1);
  const int total_splits = b + num_sm_parts;
  State& st = *state_;
  st.out = cuda::DeviceBuffer<bf16>(size_t(b) * rows * kDimV);
  st.lse = cuda::DeviceBuffer<float>(size_t(b) * rows);
  static_assert(sizeof(DecodingSchedMeta) % sizeof(int32_t) == 0);
  st.metadata = cuda::DeviceBuffer<int32_t>(size_t(num_sm_parts) * sizeof(DecodingSchedMeta) /
                                            sizeof(int32_t));
  st.num_splits = cuda::DeviceBuffer<int32_t>(size_t(b) + 1);
  st.lse_accum = cuda::DeviceBuffer<float>(size_t(total_splits) * rows);
  st.out_accum = cuda::DeviceBuffer<float>(size_t(total_splits) * rows * kDimV);
  auto* metadata = reinterpret_cast<DecodingSchedMeta*>(st.metadata.data());

  GetDecodeSchedMetaParams meta{};
  meta.b = b;
  meta.s_q = s_q;
  meta.block_size_n = 64;
  meta.fixed_overhead_num_blocks = 5;
  meta.topk = -1;
  meta.extra_topk = -1;
  meta.seqlens_k_ptr = const_cast<int*>(problem.seqlens);
  meta.tile_scheduler_metadata_ptr = metadata;
  meta.num_splits_ptr = st.num_splits.data();
  meta.num_sm_parts = num_sm_parts;
  meta.stream = stream;
  smxx::decode::run_get_decoding_sched_meta_kernel(meta);
  MLA_CUDA_CHECK(cudaGetLastError());

  DenseAttnDecodeParams& p = st.params;
  p.b = b;
  p.s_q = s_q;
  p.q_seq_per_hk = rows;
  p.d = kDimQK;
  p.d_v = kDimV;
  p.h_q = h_q;
  p.h_k = kHeadsKv;
  p.num_blocks = problem.num_pages;
  p.q_head_per_hk = h_q / kHeadsKv;
  p.is_causal = problem.causal && s_q > 1;
  p.scale_softmax = problem.softmax_scale;
  p.scale_softmax_log2 = problem.softmax_scale * 1.4426950408889634f;  // · log2(e)
  p.q_ptr = const_cast<void*>(problem.q);
  p.k_ptr = const_cast<void*>(problem.kv_cache);
  p.o_ptr = st.out.data();
  p.softmax_lse_ptr = st.lse.data();
  p.q_batch_stride = int64_t(rows) * kHeadsKv * kDimQK;
  p.q_row_stride = int64_t(kHeadsKv) * kDimQK;
  p.q_head_stride = kDimQK;
  p.k_batch_stride = int64_t(kernels::kPageSize) * kHeadsKv * kDimQK;  // one page
  p.k_row_stride = int64_t(kHeadsKv) * kDimQK;
  p.k_head_stride = kDimQK;
  p.o_batch_stride = int64_t(kHeadsKv) * rows * kDimV;
  p.o_row_stride = kDimV;
  p.o_head_stride = int64_t(rows) * kDimV;
  p.block_table = const_cast<int*>(problem.block_table);
  p.block_table_batch_stride = problem.max_pages_per_seq;
  p.page_block_size = kernels::kPageSize;
  p.seqlens_k_ptr = const_cast<int*>(problem.seqlens);
  p.tile_scheduler_metadata_ptr = metadata;
  p.num_sm_parts = num_sm_parts;
  p.num_splits_ptr = st.num_splits.data();
  p.total_num_splits = total_splits;
  p.softmax_lseaccum_ptr = st.lse_accum.data();
  p.oaccum_ptr = st.out_accum.data();

  // The combine reads the split buffers with the output's strides (one split per batch entry).
  const int lse_stride = kHeadsKv * rows, out_stride = h_q * s_q * kDimV;
  CombineParams& c = st.combine;
  c.b = b;
  c.s_q = s_q;
  c.h_q = h_q;
  c.d_v = kDimV;
  c.lse = st.lse.data();
  c.out = st.out.data();
  c.lse_accum = st.lse_accum.data();
  c.o_accum = st.out_accum.data();
  c.stride_lse_b = c.stride_lse_accum_split = lse_stride;
  c.stride_lse_s_q = c.stride_lse_accum_s_q = h_q;
  c.stride_o_b = c.stride_o_accum_split = out_stride;
  c.stride_o_s_q = c.stride_o_accum_s_q = h_q * kDimV;
  c.stride_o_h_q = c.stride_o_accum_h_q = kDimV;
  c.tile_scheduler_metadata_ptr = metadata;
  c.num_splits_ptr = st.num_splits.data();
  c.num_sm_parts = num_sm_parts;
  c.attn_sink = nullptr;
}

FlashMlaSameRun::~FlashMlaSameRun() = default;

void FlashMlaSameRun::run(cudaStream_t stream) {
  state_->params.stream = stream;
  state_->combine.stream = stream;
  sm90::run_flash_splitkv_mla_kernel<cutlass::bfloat16_t>(state_->params);
  smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(state_->combine);
}

const bf16* FlashMlaSameRun::out() const {
  return state_->out.data();
}

}  // namespace mla::bench
