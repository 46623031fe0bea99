// mla_decode._C: the PyTorch binding of the MLA decode op (torch tensors in, our host API out).
//
// Only argument checks and pointer plumbing live here; interface.py gives it FlashMLA's two call
// patterns. The one subtle thing: the "tile scheduler metadata" tensor is the op's whole
// workspace (an int32 view of mla_decode_workspace_size() bytes: the plan first, then the
// split-KV partials). make_metadata() launches the plan kernel into it; every decode() reads the
// plan and overwrites the partials, so calls sharing one metadata tensor must run in order on one
// stream, as the layers of a decode step do.
//
// Errors: a bad argument raises ValueError (TypeError for a wrong dtype) naming the argument, the
// expected and the actual value; a CUDA failure or a broken invariant raises RuntimeError.
// Messages are built with c10::str: this file includes torch, so it must not include our fmt
// (bridge.h says why).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/StringUtil.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bridge.h"
#include "mla/kernels/mla_decode.h"

namespace mla::python {
namespace {

namespace py = pybind11;
using kernels::DecodeDeviceFacts;
using kernels::kHeadDimQK;
using kernels::kHeadDimV;
using kernels::kPageSize;

// The old call pattern plans before it sees the block table: lengths are then not clamped.
constexpr int kUnboundedPagesPerSeq = INT_MAX / kPageSize;

template <typename... Args>
[[noreturn]] void value_error(const Args&... args) {
  throw py::value_error(c10::str("mla_decode: ", args...));
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kHalf:
      return "torch.float16";
    case at::kFloat:
      return "torch.float32";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    default:
      return c10::str("torch.", type);
  }
}

void check_dtype(const at::Tensor& t, const char* name, at::ScalarType want, const char* hint) {
  if (t.scalar_type() != want)
    throw py::type_error(c10::str("mla_decode: ", name, " must be ", dtype_name(want), hint,
                                  ", got ", dtype_name(t.scalar_type())));
}

void check_dim(const at::Tensor& t, const char* name, int64_t dims, const char* layout) {
  if (t.dim() != dims)
    value_error(name, " must be ", dims, "-D ", layout, ", got shape ", t.sizes());
}

void check_size(const at::Tensor& t, const char* name, int64_t dim, int64_t want,
                const char* what) {
  if (t.size(dim) != want)
    value_error(name, ".shape[", dim, "] (", what, ") must be ", want, ", got ", t.size(dim),
                " (shape ", t.sizes(), ")");
}

void check_unit_stride(const at::Tensor& t, const char* name) {
  if (t.numel() > 1 && t.size(-1) > 1 && t.stride(-1) != 1)
    value_error(name, " must be contiguous in its last dimension, got strides ", t.strides());
}

void check_cuda(const at::Tensor& t, const char* name) {
  if (!t.is_cuda()) value_error(name, " must be a CUDA tensor, got one on ", t.device());
}

void check_same_device(const at::Tensor& t, const char* name, const at::Device& device) {
  check_cuda(t, name);
  if (t.device() != device)
    value_error(name, " is on ", t.device(), " but q is on ", device, " (all on one GPU)");
}

void check_seqlens(const at::Tensor& cache_seqlens) {
  check_dim(cache_seqlens, "cache_seqlens", 1, "[batch_size]");
  check_dtype(cache_seqlens, "cache_seqlens", at::kInt, "");
  check_unit_stride(cache_seqlens, "cache_seqlens");
}

// Strides in elements, with those of size-1 dimensions (arbitrary in torch: views, unsqueeze)
// replaced by the contiguous value, as MlaDecodeParams::set_contiguous_strides() would set them.
std::vector<int64_t> strides_of(const at::Tensor& t) {
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  if (t.size(-1) == 1) strides.back() = 1;
  for (int64_t d = t.dim() - 2; d >= 0; --d)
    if (t.size(d) == 1) strides[d] = strides[d + 1] * t.size(d + 1);
  return strides;
}

cudaStream_t current_stream(const at::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

// The plan of one decode step, computed on the device from the device seqlens (current stream).
// Returns (metadata, num_splits): num_splits is a [b + 1] view of the plan's split_begin array.
std::pair<at::Tensor, at::Tensor> make_metadata(const at::Tensor& cache_seqlens, int seqlen_q,
                                                int num_heads_q, int num_heads_kv,
                                                std::optional<int64_t> max_pages_per_seq) {
  check_seqlens(cache_seqlens);
  check_cuda(cache_seqlens, "cache_seqlens");
  const at::Device device = cache_seqlens.device();
  c10::cuda::CUDAGuard guard(device);
  const DecodeDeviceFacts& facts = decode_device_facts(device.index());
  const int batch = static_cast<int>(cache_seqlens.size(0));
  const MetadataLayout layout =
      metadata_layout(batch, seqlen_q, num_heads_q, num_heads_kv, facts.num_sms);
  at::Tensor metadata = at::empty({layout.ints}, cache_seqlens.options().dtype(at::kInt));

  kernels::MlaDecodePlanParams params;
  params.seqlens = cache_seqlens.data_ptr<int32_t>();
  params.batch = batch;
  params.seqlen_q = seqlen_q;
  params.num_heads_q = num_heads_q;
  params.num_heads_kv = num_heads_kv;
  params.num_sms = facts.num_sms;
  params.max_pages_per_seq = static_cast<int>(max_pages_per_seq.value_or(kUnboundedPagesPerSeq));
  params.workspace = metadata.data_ptr();
  params.workspace_bytes = static_cast<size_t>(layout.ints) * sizeof(int32_t);
  plan(params, facts, current_stream(device));
  return {metadata, metadata.narrow(0, layout.num_splits_offset, batch + 1)};
}

// FlashMLA's dense decode: returns (out [b, s_q, h_q, 512] bf16, lse [b, h_q, s_q] fp32).
std::pair<at::Tensor, at::Tensor> decode_op(const at::Tensor& q, const at::Tensor& k_cache,
                                            const at::Tensor& block_table,
                                            const at::Tensor& cache_seqlens, int64_t head_dim_v,
                                            const at::Tensor& metadata, double softmax_scale,
                                            bool causal, bool fast) {
  // Shapes and dtypes first (they need no GPU), then devices.
  check_dim(q, "q", 4, "[batch_size, seq_len_q, num_heads_q, head_dim]");
  check_dim(k_cache, "k_cache", 4, "[num_blocks, page_block_size, num_heads_k, head_dim]");
  check_dim(block_table, "block_table", 2, "[batch_size, max_num_blocks_per_seq]");
  check_dtype(q, "q", at::kBFloat16, " (this kernel computes in bf16 only)");
  check_dtype(k_cache, "k_cache", at::kBFloat16,
              " (a bf16 latent cache; is_fp8_kvcache is not supported)");
  check_dtype(block_table, "block_table", at::kInt, "");
  check_size(q, "q", 3, kHeadDimQK, "head_dim: kv_lora_rank 512 + rope 64");
  check_size(k_cache, "k_cache", 3, kHeadDimQK, "head_dim: kv_lora_rank 512 + rope 64");
  check_size(k_cache, "k_cache", 1, kPageSize, "page_block_size");
  if (head_dim_v != kHeadDimV)
    value_error("head_dim_v must be ", kHeadDimV, " (kv_lora_rank), got ", head_dim_v);
  const int64_t batch = q.size(0), seqlen_q = q.size(1), heads_q = q.size(2);
  const int64_t heads_kv = k_cache.size(2);
  if (heads_kv < 1 || heads_q % heads_kv != 0)
    value_error("num_heads_q (q.shape[2] = ", heads_q, ") must be a multiple of num_heads_k ",
                "(k_cache.shape[2] = ", heads_kv, ")");
  check_size(block_table, "block_table", 0, batch, "batch_size, as q.shape[0]");
  check_seqlens(cache_seqlens);
  check_size(cache_seqlens, "cache_seqlens", 0, batch, "batch_size, as q.shape[0]");
  check_dim(metadata, "tile_scheduler_metadata", 1, "int32 tensor (from get_mla_metadata)");
  check_dtype(metadata, "tile_scheduler_metadata", at::kInt, " (from get_mla_metadata)");
  check_unit_stride(q, "q");
  check_unit_stride(k_cache, "k_cache");
  check_unit_stride(block_table, "block_table");
  check_unit_stride(metadata, "tile_scheduler_metadata");
  if (k_cache.size(0) < 1 || block_table.size(1) < 1)
    value_error("k_cache needs at least one block and block_table one column, got k_cache ",
                k_cache.sizes(), " and block_table ", block_table.sizes());

  const at::Device device = q.device();
  check_same_device(q, "q", device);
  check_same_device(k_cache, "k_cache", device);
  check_same_device(block_table, "block_table", device);
  check_same_device(cache_seqlens, "cache_seqlens", device);
  check_same_device(metadata, "tile_scheduler_metadata", device);
  c10::cuda::CUDAGuard guard(device);
  const DecodeDeviceFacts& facts = decode_device_facts(device.index());
  const MetadataLayout layout =
      metadata_layout(static_cast<int>(batch), static_cast<int>(seqlen_q),
                      static_cast<int>(heads_q), static_cast<int>(heads_kv), facts.num_sms);
  if (metadata.numel() != layout.ints)
    value_error("tile_scheduler_metadata has ", metadata.numel(),
                " int32 but this call's plan has ", layout.ints,
                ": it was made for another batch size or s_q * h_q / h_kv (call ",
                "get_mla_metadata once per step, with that step's cache_seqlens and shapes)");

  at::Tensor out = at::empty({batch, seqlen_q, heads_q, kHeadDimV}, q.options());
  at::Tensor lse = at::empty({batch, heads_q, seqlen_q}, q.options().dtype(at::kFloat));

  kernels::MlaDecodeParams p;
  p.batch = static_cast<int>(batch);
  p.seqlen_q = static_cast<int>(seqlen_q);
  p.num_heads_q = static_cast<int>(heads_q);
  p.num_heads_kv = static_cast<int>(heads_kv);
  p.head_dim_qk = static_cast<int>(q.size(3));
  p.head_dim_v = static_cast<int>(head_dim_v);
  p.page_size = static_cast<int>(k_cache.size(1));
  p.num_pages = static_cast<int>(k_cache.size(0));
  p.max_pages_per_seq = static_cast<int>(block_table.size(1));
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.causal = causal;
  const std::vector<int64_t> q_strides = strides_of(q), kv_strides = strides_of(k_cache);
  p.q = static_cast<const bf16*>(q.data_ptr());
  p.q_batch_stride = q_strides[0];
  p.q_seq_stride = q_strides[1];
  p.q_head_stride = q_strides[2];
  p.kv_cache = static_cast<const bf16*>(k_cache.data_ptr());
  p.kv_page_stride = kv_strides[0];
  p.kv_token_stride = kv_strides[1];
  p.kv_head_stride = kv_strides[2];
  p.block_table = block_table.data_ptr<int32_t>();
  p.block_table_batch_stride = strides_of(block_table)[0];
  p.seqlens = cache_seqlens.data_ptr<int32_t>();
  p.out = static_cast<bf16*>(out.data_ptr());
  p.out_head_stride = out.stride(2);
  p.out_seq_stride = out.stride(1);
  p.out_batch_stride = out.stride(0);
  p.lse = lse.data_ptr<float>();
  p.num_sms = facts.num_sms;
  p.workspace = metadata.data_ptr();
  p.workspace_bytes = static_cast<size_t>(metadata.numel()) * sizeof(int32_t);
  p.kernel = fast ? kernels::MlaDecodeKernel::kFast : kernels::MlaDecodeKernel::kBaseline;
  decode(p, facts, current_stream(device));
  return {out, lse};
}

py::dict metadata_layout_dict(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                              int num_sms) {
  const MetadataLayout layout =
      metadata_layout(batch, seqlen_q, num_heads_q, num_heads_kv, num_sms);
  py::dict result;
  result["ints"] = layout.ints;
  result["num_splits_offset"] = layout.num_splits_offset;
  result["num_parts"] = layout.num_parts;
  result["rows_per_tile"] = layout.rows_per_tile;
  result["max_splits"] = layout.max_splits;
  return result;
}

// The plan get_mla_metadata makes on the device for this many parts and rows per tile (the
// sequence-aligned plan unless MLA_DECODE_SEQUENCE_ALIGNED=0, as there).
std::vector<int32_t> plan_host(const std::vector<int32_t>& seqlens, int num_parts,
                               int max_pages_per_seq, int rows_per_tile) {
  return kernels::make_decode_plan_host(
      seqlens.data(), static_cast<int>(seqlens.size()), num_parts, max_pages_per_seq,
      kernels::plan_min_cost_per_part(kernels::MlaDecodePlanParams{}),
      kernels::plan_sequence_aligned(kernels::MlaDecodePlanParams{}), rows_per_tile);
}

}  // namespace
}  // namespace mla::python

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  using namespace mla::python;
  m.doc() = "mla.cpp's MLA decode kernel behind FlashMLA's interface (see mla_decode/__init__.py)";
  m.attr("HEAD_DIM_QK") = mla::kernels::kHeadDimQK;
  m.attr("HEAD_DIM_V") = mla::kernels::kHeadDimV;
  m.attr("PAGE_SIZE") = mla::kernels::kPageSize;
  m.def("make_metadata", &make_metadata, py::arg("cache_seqlens"), py::arg("seqlen_q"),
        py::arg("num_heads_q"), py::arg("num_heads_kv"), py::arg("max_pages_per_seq") = py::none(),
        "Plans one decode step on the device, on the current stream: (metadata, num_splits).");
  m.def("decode", &decode_op, py::arg("q"), py::arg("k_cache"), py::arg("block_table"),
        py::arg("cache_seqlens"), py::arg("head_dim_v"), py::arg("metadata"),
        py::arg("softmax_scale"), py::arg("causal"), py::arg("fast"),
        "The decode op on the current stream: (out, lse).");
  m.def("metadata_layout", &metadata_layout_dict, py::arg("batch"), py::arg("seqlen_q"),
        py::arg("num_heads_q"), py::arg("num_heads_kv"), py::arg("num_sms"),
        "Sizes and offsets inside the metadata tensor for a shape (no GPU needed).");
  m.def("plan_host", &plan_host, py::arg("seqlens"), py::arg("num_parts"),
        py::arg("max_pages_per_seq"), py::arg("rows_per_tile") = 16,
        "The plan computed on the host: word for word what make_metadata writes (for tests).");
}
