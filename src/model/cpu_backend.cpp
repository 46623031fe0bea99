// The CPU backend over src/ref; see cpu_backend.h.
#include "model/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ref/attention.h"
#include "ref/attention_merge.h"
#include "ref/mla_decode_ref.h"
#include "ref/ops.h"
#include "ref/rope.h"

namespace mla::model {
namespace {

// A tensor as rows of its innermost dimension: rows = product of the leading dimensions.
int64_t num_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.rank; ++d) rows *= t.shape[d];
  return rows;
}

int64_t row_length(const Tensor& t) {
  return t.shape[t.rank - 1];
}

template <typename T>
T* row_pointer(const Tensor& t, int64_t row) {
  int64_t offset = 0;
  for (int d = t.rank - 2; d >= 0; --d) {
    offset += (row % t.shape[d]) * t.stride[d];
    row /= t.shape[d];
  }
  return t.as<T>() + offset;
}

void check_innermost_contiguous(const Tensor& t, const char* what) {
  MLA_CHECK(t.rank >= 1);
  if (t.stride[t.rank - 1] != 1 && t.shape[t.rank - 1] > 1)
    throw_internal_error(
        __FILE__, __LINE__,
        fmt::format("{}: innermost dimension not contiguous: {}", what, describe(t)));
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  bool same = a.rank == b.rank;
  for (int d = 0; same && d < a.rank; ++d) same = a.shape[d] == b.shape[d];
  if (!same)
    throw_internal_error(
        __FILE__, __LINE__,
        fmt::format("{}: shapes differ: {} vs {}", what, describe(a), describe(b)));
}

}  // namespace

const StepPlan& CpuBackend::plan() const {
  MLA_CHECK(plan_ != nullptr);
  return *plan_;
}

Tensor CpuBackend::allocate(DType dtype, std::initializer_list<int64_t> shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  MLA_CHECK_GE(count, 0);
  // Zero-initialised; at least one element so that even an empty tensor has an address.
  std::shared_ptr<void> storage(std::calloc(std::max<int64_t>(count, 1), dtype_size(dtype)),
                                std::free);
  if (!storage) throw_error("cpu backend: out of memory allocating {} elements", count);
  Tensor tensor = make_contiguous_view(storage.get(), dtype, shape);
  tensor.storage = std::move(storage);
  if (stats_.log_allocations) stats_.allocations.emplace_back(shape);
  return tensor;
}

Tensor CpuBackend::upload_weight(const std::string& name, std::vector<float> values,
                                 std::initializer_list<int64_t> shape) {
  auto owner = std::make_shared<std::vector<float>>(std::move(values));
  Tensor tensor = make_contiguous_view(owner->data(), DType::kF32, shape);
  MLA_CHECK_EQ(tensor.numel(), static_cast<int64_t>(owner->size()));
  tensor.storage = std::shared_ptr<void>(owner, owner->data());
  stats_.weight_elements += tensor.numel();
  ++stats_.weight_uploads;
  return tensor;
}

Tensor CpuBackend::new_weight(DType dtype, int64_t rows, int64_t cols) {
  MLA_CHECK(dtype == DType::kF32);
  Tensor tensor = allocate(DType::kF32, {rows, cols});
  stats_.weight_elements += tensor.numel();
  return tensor;
}

void CpuBackend::release_weight(Tensor& weight) {
  if (weight.storage.use_count() == 1) stats_.weight_elements -= weight.numel();
  weight = Tensor{};
}

void CpuBackend::fill(Tensor& dst, float value) {
  MLA_CHECK(dst.dtype == DType::kF32);
  check_innermost_contiguous(dst, "fill");
  for (int64_t r = 0; r < num_rows(dst); ++r) {
    float* row = row_pointer<float>(dst, r);
    std::fill(row, row + row_length(dst), value);
  }
}

void CpuBackend::copy_to_host(const Tensor& src, float* dst) {
  MLA_CHECK(src.dtype == DType::kF32);
  check_innermost_contiguous(src, "copy_to_host");
  const int64_t length = row_length(src);
  for (int64_t r = 0; r < num_rows(src); ++r)
    std::memcpy(dst + r * length, row_pointer<float>(src, r), length * sizeof(float));
}

void CpuBackend::begin_step(const StepPlan& plan) {
  plan_ = &plan;
}

void CpuBackend::embedding(const Tensor& table, Tensor& out) {
  const StepPlan& step = plan();
  MLA_CHECK(table.rank == 2 && table.is_contiguous() && out.rank == 2);
  MLA_CHECK_EQ(out.shape[0], step.num_tokens);
  MLA_CHECK_EQ(out.shape[1], table.shape[1]);
  for (int t = 0; t < step.num_tokens; ++t) {
    MLA_CHECK(step.token_ids[t] >= 0 && step.token_ids[t] < table.shape[0]);
    std::memcpy(row_pointer<float>(out, t), table.as<float>() + step.token_ids[t] * table.shape[1],
                table.shape[1] * sizeof(float));
  }
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  MLA_CHECK(x.rank == 2 && out.rank == 2 && weight.rank == 1);
  check_same_shape(x, out, "rms_norm");
  MLA_CHECK_EQ(weight.shape[0], x.shape[1]);
  check_innermost_contiguous(x, "rms_norm x");
  check_innermost_contiguous(out, "rms_norm out");
  ref::rms_norm(x.as<float>(), x.stride[0], weight.as<float>(), x.shape[0], x.shape[1], eps,
                out.as<float>(), out.stride[0]);
}

void CpuBackend::linear(const Tensor& x, const Tensor& weight, Tensor& out) {
  MLA_CHECK(x.rank == 2 && out.rank == 2 && weight.rank == 2 && weight.is_contiguous());
  MLA_CHECK_EQ(x.shape[1], weight.shape[1]);
  MLA_CHECK_EQ(out.shape[0], x.shape[0]);
  MLA_CHECK_EQ(out.shape[1], weight.shape[0]);
  check_innermost_contiguous(x, "linear x");
  check_innermost_contiguous(out, "linear out");
  ref::linear(x.as<float>(), x.stride[0], weight.as<float>(), x.shape[0], x.shape[1],
              weight.shape[0], out.as<float>(), out.stride[0]);
}

void CpuBackend::add(Tensor& x, const Tensor& y) {
  check_same_shape(x, y, "add");
  check_innermost_contiguous(x, "add x");
  check_innermost_contiguous(y, "add y");
  const int64_t length = row_length(x);
  for (int64_t r = 0; r < num_rows(x); ++r) {
    float* a = row_pointer<float>(x, r);
    const float* b = row_pointer<float>(y, r);
    for (int64_t i = 0; i < length; ++i) a[i] += b[i];
  }
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  check_same_shape(gate, up, "silu_mul");
  check_same_shape(gate, out, "silu_mul");
  for (int64_t r = 0; r < num_rows(gate); ++r)
    ref::silu_mul(row_pointer<float>(gate, r), row_pointer<float>(up, r), row_length(gate),
                  row_pointer<float>(out, r));
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  check_same_shape(src, dst, "copy");
  check_innermost_contiguous(dst, "copy dst");
  const int64_t length = row_length(src);
  const int64_t inner_stride = src.stride[src.rank - 1];
  for (int64_t r = 0; r < num_rows(src); ++r) {
    const float* from = row_pointer<float>(src, r);
    float* to = row_pointer<float>(dst, r);
    for (int64_t i = 0; i < length; ++i) to[i] = from[i * inner_stride];
  }
}

void CpuBackend::gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) {
  MLA_CHECK(x.rank == 2 && out.rank == 2);
  MLA_CHECK_EQ(out.shape[0], static_cast<int64_t>(rows.size()));
  MLA_CHECK_EQ(out.shape[1], x.shape[1]);
  for (size_t i = 0; i < rows.size(); ++i) {
    MLA_CHECK(rows[i] >= 0 && rows[i] < x.shape[0]);
    std::memcpy(row_pointer<float>(out, i), row_pointer<float>(x, rows[i]),
                x.shape[1] * sizeof(float));
  }
}

void CpuBackend::rope(const Tensor& x, const RopeTable& rope, int64_t first_token, Tensor& out) {
  const StepPlan& step = plan();
  MLA_CHECK(x.rank == 2 || x.rank == 3);
  check_same_shape(x, out, "rope");
  check_innermost_contiguous(x, "rope x");
  check_innermost_contiguous(out, "rope out");
  MLA_CHECK(first_token >= 0 && first_token + x.shape[0] <= step.num_tokens);
  const int64_t rotary_dim = x.shape[x.rank - 1];
  MLA_CHECK_EQ(rotary_dim, 2 * static_cast<int64_t>(rope.inv_freq.size()));
  // Out of place is a copy, then the in-place twin on out: the same arithmetic either way.
  MLA_CHECK(out.data != x.data || out.stride == x.stride);  // in place only as the same view
  if (out.data != x.data) copy(x, out);
  const int64_t heads = out.rank == 3 ? out.shape[1] : 1;
  const int64_t head_stride = out.rank == 3 ? out.stride[1] : 0;
  ref::apply_rope(out.as<float>(), out.shape[0], out.stride[0], heads, head_stride,
                  static_cast<int>(rotary_dim), step.positions.data() + first_token,
                  rope.inv_freq.data(), rope.cos_sin_scale);
}

void CpuBackend::write_latent_cache(const Tensor& latent, Tensor& cache) {
  const StepPlan& step = plan();
  MLA_CHECK(latent.rank == 2 && cache.rank == 3 && cache.is_contiguous());
  MLA_CHECK_EQ(latent.shape[0], step.num_tokens);
  MLA_CHECK_EQ(latent.shape[1], cache.shape[2]);
  const int64_t slots = cache.shape[0] * cache.shape[1];
  for (int t = 0; t < step.num_tokens; ++t) {
    const int64_t slot = step.slot_mapping[t];
    if (slot < 0) continue;  // a padding row (pad_decode_plan): no latent to keep
    MLA_CHECK_LT(slot, slots);
    std::memcpy(cache.as<float>() + slot * cache.shape[2], row_pointer<float>(latent, t),
                cache.shape[2] * sizeof(float));
  }
}

void CpuBackend::gather_latent_cache(const Tensor& cache, const std::vector<int64_t>& slots,
                                     Tensor& out) {
  MLA_CHECK(cache.rank == 3 && cache.is_contiguous() && out.rank == 2);
  MLA_CHECK_EQ(out.shape[0], static_cast<int64_t>(slots.size()));
  MLA_CHECK_EQ(out.shape[1], cache.shape[2]);
  for (size_t i = 0; i < slots.size(); ++i) {
    MLA_CHECK(slots[i] >= 0 && slots[i] < cache.shape[0] * cache.shape[1]);
    std::memcpy(row_pointer<float>(out, i), cache.as<float>() + slots[i] * cache.shape[2],
                cache.shape[2] * sizeof(float));
  }
}

void CpuBackend::head_matmul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& out) {
  MLA_CHECK(a.rank == 3 && b.rank == 3 && out.rank == 3);
  check_innermost_contiguous(a, "head_matmul a");
  check_innermost_contiguous(b, "head_matmul b");
  check_innermost_contiguous(out, "head_matmul out");
  ref::HeadMatmulArgs args;
  args.tokens = a.shape[0];
  args.heads = a.shape[1];
  args.k = a.shape[2];
  args.n = transpose_b ? b.shape[1] : b.shape[2];
  args.transpose_b = transpose_b;
  MLA_CHECK_EQ(b.shape[0], args.heads);
  MLA_CHECK_EQ(transpose_b ? b.shape[2] : b.shape[1], args.k);
  MLA_CHECK_EQ(out.shape[0], args.tokens);
  MLA_CHECK_EQ(out.shape[1], args.heads);
  MLA_CHECK_EQ(out.shape[2], args.n);
  args.a = a.as<float>();
  args.a_token_stride = a.stride[0];
  args.a_head_stride = a.stride[1];
  args.b = b.as<float>();
  args.b_head_stride = b.stride[0];
  args.b_row_stride = b.stride[1];
  args.out = out.as<float>();
  args.out_token_stride = out.stride[0];
  args.out_head_stride = out.stride[1];
  ref::head_matmul(args);
}

void CpuBackend::mla_decode(const Tensor& q, const Tensor& cache, int head_dim_v,
                            float softmax_scale, Tensor& out, Tensor& lse) {
  const StepPlan& step = plan();
  MLA_CHECK(q.rank == 3 && q.is_contiguous() && cache.rank == 3 && cache.is_contiguous());
  MLA_CHECK(out.rank == 3 && out.is_contiguous() && lse.rank == 2 && lse.is_contiguous());
  MLA_CHECK_EQ(q.shape[0], step.num_decode_tokens);
  MLA_CHECK_EQ(q.shape[2], cache.shape[2]);
  MLA_CHECK_EQ(out.shape[2], head_dim_v);
  ref::MlaDecodeInputs<float> inputs;
  inputs.batch = step.num_decode_tokens;
  inputs.seqlen_q = 1;
  inputs.num_heads_q = static_cast<int>(q.shape[1]);
  inputs.num_heads_kv = 1;
  inputs.head_dim_qk = static_cast<int>(q.shape[2]);
  inputs.head_dim_v = head_dim_v;
  inputs.page_size = static_cast<int>(cache.shape[1]);
  inputs.num_pages = static_cast<int>(cache.shape[0]);
  inputs.max_pages_per_seq = step.decode_max_pages;
  inputs.softmax_scale = softmax_scale;
  inputs.causal = true;
  inputs.q = q.as<float>();
  inputs.kv_cache = cache.as<float>();
  inputs.block_table = step.decode_block_table.data();
  inputs.seqlens = step.decode_seqlens.data();
  ref::mla_decode(inputs, out.as<float>(), lse.as<float>());
}

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::vector<AttentionSpan>& spans, float softmax_scale,
                           Tensor& out, Tensor& lse) {
  MLA_CHECK(q.rank == 3 && k.rank == 3 && v.rank == 3 && out.rank == 3 && lse.rank == 2);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &out, &lse})
    check_innermost_contiguous(*t, "attention");
  MLA_CHECK_EQ(q.shape[2], k.shape[2]);
  MLA_CHECK_EQ(k.shape[0], v.shape[0]);
  MLA_CHECK_EQ(out.shape[0], q.shape[0]);
  MLA_CHECK_EQ(out.shape[2], v.shape[2]);
  MLA_CHECK_EQ(lse.shape[0], q.shape[0]);
  for (int64_t r = 0; r < out.shape[0]; ++r) {
    for (int64_t h = 0; h < out.shape[1]; ++h) {
      float* row = out.as<float>() + r * out.stride[0] + h * out.stride[1];
      std::fill(row, row + out.shape[2], 0.f);
      lse.as<float>()[r * lse.stride[0] + h] = -std::numeric_limits<float>::infinity();
    }
  }
  for (const AttentionSpan& span : spans) {
    MLA_CHECK(span.q_begin >= 0 && span.q_begin + span.q_count <= q.shape[0]);
    MLA_CHECK(span.k_begin >= 0 && span.k_begin + span.k_count <= k.shape[0]);
    ref::AttentionArgs args;
    args.q_count = span.q_count;
    args.k_count = span.k_count;
    args.heads = q.shape[1];
    args.head_dim_qk = q.shape[2];
    args.head_dim_v = v.shape[2];
    args.causal = span.causal;
    args.softmax_scale = softmax_scale;
    args.q = q.as<float>() + span.q_begin * q.stride[0];
    args.q_token_stride = q.stride[0];
    args.q_head_stride = q.stride[1];
    args.k = k.as<float>() + span.k_begin * k.stride[0];
    args.k_token_stride = k.stride[0];
    args.k_head_stride = k.stride[1];
    args.v = v.as<float>() + span.k_begin * v.stride[0];
    args.v_token_stride = v.stride[0];
    args.v_head_stride = v.stride[1];
    args.out = out.as<float>() + span.q_begin * out.stride[0];
    args.out_token_stride = out.stride[0];
    args.out_head_stride = out.stride[1];
    args.lse = lse.as<float>() + span.q_begin * lse.stride[0];
    args.lse_token_stride = lse.stride[0];
    ref::attention(args);
  }
}

void CpuBackend::merge_attention(Tensor& out, Tensor& lse, const Tensor& part_out,
                                 const Tensor& part_lse) {
  check_same_shape(out, part_out, "merge_attention");
  check_same_shape(lse, part_lse, "merge_attention lse");
  MLA_CHECK(out.rank == 3 && lse.rank == 2);
  for (int64_t r = 0; r < out.shape[0]; ++r)
    for (int64_t h = 0; h < out.shape[1]; ++h)
      ref::merge_attention_partial(
          out.as<float>() + r * out.stride[0] + h * out.stride[1],
          lse.as<float>() + r * lse.stride[0] + h,
          part_out.as<float>() + r * part_out.stride[0] + h * part_out.stride[1],
          part_lse.as<float>()[r * part_lse.stride[0] + h], static_cast<int>(out.shape[2]));
}

void CpuBackend::moe_route(const Tensor& router_logits, const Tensor& correction_bias,
                           const ref::MoeRoutingParams& params, Tensor& expert_ids,
                           Tensor& expert_weights) {
  MLA_CHECK(router_logits.rank == 2 && router_logits.is_contiguous());
  MLA_CHECK_EQ(router_logits.shape[1], params.num_experts);
  MLA_CHECK(expert_ids.dtype == DType::kI32 && expert_ids.is_contiguous());
  MLA_CHECK(expert_weights.is_contiguous());
  const int64_t pairs = params.top_k + params.appended_experts;
  MLA_CHECK_EQ(expert_ids.shape[1], pairs);
  MLA_CHECK_EQ(expert_weights.shape[1], pairs);
  const float* bias = correction_bias.empty() ? nullptr : correction_bias.as<float>();
  for (int64_t t = 0; t < router_logits.shape[0]; ++t)
    ref::route_experts(router_logits.as<float>() + t * params.num_experts, bias, params,
                       expert_ids.as<int32_t>() + t * pairs,
                       expert_weights.as<float>() + t * pairs);
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& expert_ids,
                             const Tensor& expert_weights, const ExpertWeights& experts,
                             bool accumulate, Tensor& out) {
  MLA_CHECK(x.rank == 2 && x.is_contiguous() && out.is_contiguous());
  check_same_shape(x, out, "moe_experts");
  const int64_t tokens = x.shape[0];
  const int64_t hidden = x.shape[1];
  const int64_t top_k = expert_ids.shape[1];
  const int num_experts = static_cast<int>(experts.gate_proj.size());
  if (!accumulate) fill(out, 0.f);
  // Expert by expert (as Hugging Face's loop): gather the tokens routed to it, run its MLP on
  // them as one matrix, add the weighted result back.
  for (int e = 0; e < num_experts; ++e) {
    std::vector<int64_t> token_of, slot_of;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t k = 0; k < top_k; ++k)
        if (expert_ids.as<int32_t>()[t * top_k + k] == e) {
          token_of.push_back(t);
          slot_of.push_back(k);
        }
    if (token_of.empty()) continue;
    const int64_t rows = static_cast<int64_t>(token_of.size());
    const int64_t width = experts.gate_proj[e].shape[0];
    std::vector<float> input(rows * hidden), gate(rows * width), up(rows * width),
        activation(rows * width), result(rows * hidden);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&input[r * hidden], x.as<float>() + token_of[r] * hidden, hidden * sizeof(float));
    ref::linear(input.data(), hidden, experts.gate_proj[e].as<float>(), rows, hidden, width,
                gate.data(), width);
    ref::linear(input.data(), hidden, experts.up_proj[e].as<float>(), rows, hidden, width,
                up.data(), width);
    ref::silu_mul(gate.data(), up.data(), rows * width, activation.data());
    ref::linear(activation.data(), width, experts.down_proj[e].as<float>(), rows, width, hidden,
                result.data(), hidden);
    for (int64_t r = 0; r < rows; ++r) {
      const float weight = expert_weights.as<float>()[token_of[r] * top_k + slot_of[r]];
      float* target = out.as<float>() + token_of[r] * hidden;
      for (int64_t i = 0; i < hidden; ++i) target[i] += result[r * hidden + i] * weight;
    }
  }
}

}  // namespace mla::model
