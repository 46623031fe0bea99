// Host side of the dense ops (mla/kernels/ops.h): argument validation and the vector-path choice,
// then the launchers in kernels/ops/*.cu.
//
// Validation happens here, once, with messages naming the op, the argument, the expected and the
// actual value. An empty problem (0 rows, 0 tokens) launches nothing, but its arguments are still
// checked as far as they can be, so a mistake does not hide until the first non-empty step.
#include <cstdint>
#include <string>

#include "common/arg_checks.h"
#include "core/error.h"
#include "ops/ops_host.h"
#include "mla/kernels/ops.h"

namespace mla::kernels {

int scalar_type_size(ScalarType type) {
  return type == ScalarType::kBF16 ? 2 : 4;
}

const char* to_string(ScalarType type) {
  switch (type) {
    case ScalarType::kF32:
      return "f32";
    case ScalarType::kBF16:
      return "bf16";
  }
  return "invalid";
}

namespace {

using ops::vector_ok;

using arg_checks::require;

void check_type(const char* op, const char* name, ScalarType type) {
  require(type == ScalarType::kF32 || type == ScalarType::kBF16, op,
          fmt::format("{}.type must be kF32 or kBF16, got value {}", name, static_cast<int>(type)));
}

void check_count(const char* op, const char* name, int64_t value) {
  require(value >= 0, op, fmt::format("{} must be >= 0, got {}", name, value));
}

void check_pointer(const char* op, const char* name, const void* pointer, int64_t alignment) {
  arg_checks::check_pointer(op, name, pointer, static_cast<size_t>(alignment),
                            " (its element size)");
}

// A [rows, cols] view: a known type, data non-null and element-aligned, rows not overlapping.
void check_2d(const char* op, const char* name, const Strided2D& view, int64_t rows, int64_t cols) {
  check_type(op, name, view.type);
  if (rows == 0 || cols == 0) return;
  check_pointer(op, fmt::format("{}.data", name).c_str(), view.data, scalar_type_size(view.type));
  require(rows == 1 || view.row_stride >= cols, op,
          fmt::format("{}.row_stride must be >= cols ({}), got {}", name, cols, view.row_stride));
}

// out may be x itself only as the same view (same type and row stride).
void check_alias(const char* op, const char* out_name, const Strided2D& out, const char* in_name,
                 const Strided2D& in) {
  if (out.data != in.data) return;
  require(out.type == in.type && out.row_stride == in.row_stride, op,
          fmt::format("{} aliases {} but differs in type ({} vs {}) or row stride ({} vs {}); in "
                      "place needs the same view",
                      out_name, in_name, to_string(out.type), to_string(in.type), out.row_stride,
                      in.row_stride));
}

void check_norm_args(const char* op, const bf16* weight, int64_t rows, int64_t cols, float eps) {
  check_count(op, "rows", rows);
  check_count(op, "cols", cols);
  require(eps >= 0.f, op, fmt::format("eps must be >= 0, got {}", eps));
  if (rows > 0) require(cols > 0, op, "cols must be > 0 when rows > 0 (a norm of nothing)");
  if (rows > 0) check_pointer(op, "weight", weight, 2);
}

}  // namespace

void launch_embedding(const bf16* table, int64_t vocab, int64_t hidden, const int32_t* token_ids,
                      int64_t tokens, Strided2D out, cudaStream_t stream) {
  constexpr const char* op = "launch_embedding";
  check_count(op, "vocab", vocab);
  check_count(op, "hidden", hidden);
  check_count(op, "tokens", tokens);
  check_2d(op, "out", out, tokens, hidden);
  if (tokens == 0 || hidden == 0) return;
  require(vocab > 0, op, "vocab must be > 0");
  check_pointer(op, "table", table, 2);
  check_pointer(op, "token_ids", token_ids, 4);
  const bool vec = vector_ok(table, ScalarType::kBF16, hidden, hidden) &&
                   vector_ok(out.data, out.type, out.row_stride, hidden);
  ops::launch_embedding_kernel(table, vocab, hidden, token_ids, tokens, out, vec, stream);
}

void launch_rms_norm(Strided2D x, const bf16* weight, int64_t rows, int64_t cols, float eps,
                     Strided2D out, cudaStream_t stream) {
  constexpr const char* op = "launch_rms_norm";
  check_norm_args(op, weight, rows, cols, eps);
  check_2d(op, "x", x, rows, cols);
  check_2d(op, "out", out, rows, cols);
  check_alias(op, "out", out, "x", x);
  if (rows == 0) return;
  const bool vec = vector_ok(x.data, x.type, x.row_stride, cols) &&
                   vector_ok(out.data, out.type, out.row_stride, cols) &&
                   vector_ok(weight, ScalarType::kBF16, 0, cols);
  ops::launch_rms_norm_kernel(x, weight, rows, cols, eps, out, vec, stream);
}

void launch_add_rms_norm(float* residual, int64_t residual_stride, Strided2D delta,
                         const bf16* weight, int64_t rows, int64_t cols, float eps, Strided2D out,
                         cudaStream_t stream) {
  constexpr const char* op = "launch_add_rms_norm";
  check_norm_args(op, weight, rows, cols, eps);
  const Strided2D residual_view{residual, ScalarType::kF32, residual_stride};
  check_2d(op, "residual", residual_view, rows, cols);
  check_2d(op, "delta", delta, rows, cols);
  check_2d(op, "out", out, rows, cols);
  check_alias(op, "out", out, "delta", delta);
  require(rows == 0 || (out.data != residual && delta.data != residual), op,
          "out and delta must not be the residual (the residual is updated in place)");
  if (rows == 0) return;
  const bool vec = vector_ok(residual, ScalarType::kF32, residual_stride, cols) &&
                   vector_ok(delta.data, delta.type, delta.row_stride, cols) &&
                   vector_ok(out.data, out.type, out.row_stride, cols) &&
                   vector_ok(weight, ScalarType::kBF16, 0, cols);
  ops::launch_add_rms_norm_kernel(residual, residual_stride, delta, weight, rows, cols, eps, out,
                                  vec, stream);
}

void launch_add(Strided2D x, Strided2D y, int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr const char* op = "launch_add";
  check_count(op, "rows", rows);
  check_count(op, "cols", cols);
  check_2d(op, "x", x, rows, cols);
  check_2d(op, "y", y, rows, cols);
  if (rows == 0 || cols == 0) return;
  const bool vec = vector_ok(x.data, x.type, x.row_stride, cols) &&
                   vector_ok(y.data, y.type, y.row_stride, cols);
  ops::launch_add_kernel(x, y, rows, cols, vec, stream);
}

void launch_silu_mul(Strided2D gate, Strided2D up, int64_t rows, int64_t cols, Strided2D out,
                     cudaStream_t stream) {
  constexpr const char* op = "launch_silu_mul";
  check_count(op, "rows", rows);
  check_count(op, "cols", cols);
  check_2d(op, "gate", gate, rows, cols);
  check_2d(op, "up", up, rows, cols);
  check_2d(op, "out", out, rows, cols);
  check_alias(op, "out", out, "gate", gate);
  check_alias(op, "out", out, "up", up);
  if (rows == 0 || cols == 0) return;
  const bool vec = vector_ok(gate.data, gate.type, gate.row_stride, cols) &&
                   vector_ok(up.data, up.type, up.row_stride, cols) &&
                   vector_ok(out.data, out.type, out.row_stride, cols);
  ops::launch_silu_mul_kernel(gate, up, rows, cols, out, vec, stream);
}

void launch_copy(Strided3D src, Strided3D dst, int64_t d0, int64_t d1, int64_t d2,
                 cudaStream_t stream) {
  constexpr const char* op = "launch_copy";
  check_count(op, "d0", d0);
  check_count(op, "d1", d1);
  check_count(op, "d2", d2);
  check_type(op, "src", src.type);
  check_type(op, "dst", dst.type);
  if (d0 == 0 || d1 == 0 || d2 == 0) return;
  check_pointer(op, "src.data", src.data, scalar_type_size(src.type));
  check_pointer(op, "dst.data", dst.data, scalar_type_size(dst.type));
  require(src.stride0 >= 0 && src.stride1 >= 0, op,
          fmt::format("src strides must be >= 0 (0 broadcasts), got {} and {}", src.stride0,
                      src.stride1));
  // dst rows must not overlap: each dimension's stride covers everything inside it.
  require(d1 == 1 || dst.stride1 >= d2, op,
          fmt::format("dst.stride1 must be >= d2 ({}), got {}", d2, dst.stride1));
  require(d0 == 1 || dst.stride0 >= (d1 - 1) * dst.stride1 + d2, op,
          fmt::format("dst.stride0 must be >= (d1 - 1) · stride1 + d2 = {}, got {}",
                      (d1 - 1) * dst.stride1 + d2, dst.stride0));
  const bool vec = vector_ok(src.data, src.type, src.stride0, d2) &&
                   vector_ok(src.data, src.type, src.stride1, d2) &&
                   vector_ok(dst.data, dst.type, dst.stride0, d2) &&
                   vector_ok(dst.data, dst.type, dst.stride1, d2);
  ops::launch_copy_kernel(src, dst, d0, d1, d2, vec, stream);
}

void launch_gather_rows(Strided2D x, const int32_t* rows, int64_t count, int64_t cols,
                        Strided2D out, cudaStream_t stream) {
  constexpr const char* op = "launch_gather_rows";
  check_count(op, "count", count);
  check_count(op, "cols", cols);
  check_type(op, "x", x.type);
  check_2d(op, "out", out, count, cols);
  if (count == 0 || cols == 0) return;
  check_pointer(op, "x.data", x.data, scalar_type_size(x.type));
  check_pointer(op, "rows", rows, 4);
  require(x.row_stride >= cols, op,
          fmt::format("x.row_stride must be >= cols ({}), got {}", cols, x.row_stride));
  require(x.data != out.data, op, "out must not be x (rows would be overwritten while read)");
  const bool vec = vector_ok(x.data, x.type, x.row_stride, cols) &&
                   vector_ok(out.data, out.type, out.row_stride, cols);
  ops::launch_gather_rows_kernel(x, rows, count, cols, out, vec, stream);
}

namespace {

// The shape checks both launch_rope forms share; false when there is nothing to rotate.
bool rope_has_work(const char* op, int64_t tokens, int64_t heads, int rotary_dim) {
  check_count(op, "tokens", tokens);
  check_count(op, "heads", heads);
  require(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= ops::kMaxRotaryDim, op,
          fmt::format("rotary_dim must be even and in [2, {}], got {}", ops::kMaxRotaryDim,
                      rotary_dim));
  return tokens > 0 && heads > 0;
}

}  // namespace

void launch_rope(void* x, ScalarType type, int64_t tokens, int64_t token_stride, int64_t heads,
                 int64_t head_stride, int rotary_dim, const int32_t* positions,
                 const float* inv_freq, float cos_sin_scale, cudaStream_t stream) {
  constexpr const char* op = "launch_rope";
  check_type(op, "x", type);
  if (!rope_has_work(op, tokens, heads, rotary_dim)) return;
  require(heads == 1 || head_stride >= rotary_dim, op,
          fmt::format("head_stride must be >= rotary_dim ({}), got {}", rotary_dim, head_stride));
  require(tokens == 1 || token_stride >= (heads - 1) * head_stride + rotary_dim, op,
          fmt::format("token_stride must be >= (heads - 1) · head_stride + rotary_dim = {}, got {}",
                      (heads - 1) * head_stride + rotary_dim, token_stride));
  const Strided3D view{x, type, token_stride, head_stride};
  launch_rope(view, view, tokens, heads, rotary_dim, positions, inv_freq, cos_sin_scale, stream);
}

void launch_rope(Strided3D x, Strided3D out, int64_t tokens, int64_t heads, int rotary_dim,
                 const int32_t* positions, const float* inv_freq, float cos_sin_scale,
                 cudaStream_t stream) {
  constexpr const char* op = "launch_rope";
  check_type(op, "x", x.type);
  check_type(op, "out", out.type);
  if (!rope_has_work(op, tokens, heads, rotary_dim)) return;
  check_pointer(op, "x.data", x.data, scalar_type_size(x.type));
  check_pointer(op, "out.data", out.data, scalar_type_size(out.type));
  check_pointer(op, "positions", positions, 4);
  check_pointer(op, "inv_freq", inv_freq, 4);
  require(x.stride0 >= 0 && x.stride1 >= 0, op,
          fmt::format("x strides must be >= 0, got {} and {}", x.stride0, x.stride1));
  // out's heads and tokens must not overlap: each stride covers everything inside it.
  require(heads == 1 || out.stride1 >= rotary_dim, op,
          fmt::format("out.stride1 must be >= rotary_dim ({}), got {}", rotary_dim, out.stride1));
  require(tokens == 1 || out.stride0 >= (heads - 1) * out.stride1 + rotary_dim, op,
          fmt::format("out.stride0 must be >= (heads - 1) · stride1 + rotary_dim = {}, got {}",
                      (heads - 1) * out.stride1 + rotary_dim, out.stride0));
  require(out.data != x.data ||
              (out.type == x.type && out.stride0 == x.stride0 && out.stride1 == x.stride1),
          op,
          fmt::format("out aliases x but differs in type ({} vs {}) or strides ({}, {} vs {}, {}); "
                      "in place needs the same view",
                      to_string(out.type), to_string(x.type), out.stride0, out.stride1, x.stride0,
                      x.stride1));
  ops::launch_rope_kernel(x, out, tokens, heads, rotary_dim, positions, inv_freq, cos_sin_scale,
                          stream);
}

void launch_latent_cache_write(const LatentCacheWriteParams& p, cudaStream_t stream) {
  constexpr const char* op = "launch_latent_cache_write";
  check_count(op, "tokens", p.tokens);
  check_count(op, "num_slots", p.num_slots);
  require(p.kv_lora_rank > 0, op, fmt::format("kv_lora_rank must be > 0, got {}", p.kv_lora_rank));
  require(
      p.rope_dim >= 0 && p.rope_dim % 2 == 0 && p.rope_dim <= ops::kMaxRotaryDim, op,
      fmt::format("rope_dim must be even and in [0, {}], got {}", ops::kMaxRotaryDim, p.rope_dim));
  require(p.eps >= 0.f, op, fmt::format("eps must be >= 0, got {}", p.eps));
  const int64_t latent_dim = int64_t(p.kv_lora_rank) + p.rope_dim;
  check_2d(op, "kv_a", p.kv_a, p.tokens, latent_dim);
  check_type(op, "latent_out", p.latent_out.type);
  if (p.latent_out.data != nullptr) check_2d(op, "latent_out", p.latent_out, p.tokens, latent_dim);
  if (p.tokens == 0) return;
  check_pointer(op, "kv_norm_weight", p.kv_norm_weight, 2);
  check_pointer(op, "positions", p.positions, 4);
  check_pointer(op, "slots", p.slots, 8);
  if (p.rope_dim > 0) check_pointer(op, "inv_freq", p.inv_freq, 4);
  if (p.num_slots > 0) {
    check_pointer(op, "cache", p.cache, 2);
    require(p.num_slots == 1 || p.cache_slot_stride >= latent_dim, op,
            fmt::format("cache_slot_stride must be >= kv_lora_rank + rope_dim ({}), got {}",
                        latent_dim, p.cache_slot_stride));
  }
  require(p.latent_out.data == nullptr || p.latent_out.data != p.kv_a.data, op,
          "latent_out must not be kv_a (the norm reads kv_c twice)");
  ops::launch_latent_cache_write_kernel(p, stream);
}

void launch_gather_latent_cache(const bf16* cache, int64_t cache_slot_stride, int64_t latent_dim,
                                const int64_t* slots, int64_t count, Strided2D out,
                                cudaStream_t stream) {
  constexpr const char* op = "launch_gather_latent_cache";
  check_count(op, "count", count);
  check_count(op, "latent_dim", latent_dim);
  check_2d(op, "out", out, count, latent_dim);
  if (count == 0 || latent_dim == 0) return;
  check_pointer(op, "cache", cache, 2);
  check_pointer(op, "slots", slots, 8);
  require(cache_slot_stride >= latent_dim, op,
          fmt::format("cache_slot_stride must be >= latent_dim ({}), got {}", latent_dim,
                      cache_slot_stride));
  const bool vec = vector_ok(cache, ScalarType::kBF16, cache_slot_stride, latent_dim) &&
                   vector_ok(out.data, out.type, out.row_stride, latent_dim);
  ops::launch_gather_latent_cache_kernel(cache, cache_slot_stride, latent_dim, slots, count, out,
                                         vec, stream);
}

void launch_merge_attention(Strided3D out, float* lse, int64_t lse_row_stride, Strided3D part_out,
                            const float* part_lse, int64_t part_lse_row_stride, int64_t rows,
                            int64_t heads, int64_t d_v, cudaStream_t stream) {
  constexpr const char* op = "launch_merge_attention";
  check_count(op, "rows", rows);
  check_count(op, "heads", heads);
  check_count(op, "d_v", d_v);
  check_type(op, "out", out.type);
  check_type(op, "part_out", part_out.type);
  if (rows == 0 || heads == 0) return;
  check_pointer(op, "lse", lse, 4);
  check_pointer(op, "part_lse", part_lse, 4);
  require(rows == 1 || lse_row_stride >= heads, op,
          fmt::format("lse_row_stride must be >= heads ({}), got {}", heads, lse_row_stride));
  require(
      rows == 1 || part_lse_row_stride >= heads, op,
      fmt::format("part_lse_row_stride must be >= heads ({}), got {}", heads, part_lse_row_stride));
  if (d_v > 0) {
    check_pointer(op, "out.data", out.data, scalar_type_size(out.type));
    check_pointer(op, "part_out.data", part_out.data, scalar_type_size(part_out.type));
    require(heads == 1 || out.stride1 >= d_v, op,
            fmt::format("out.stride1 must be >= d_v ({}), got {}", d_v, out.stride1));
    require(rows == 1 || out.stride0 >= (heads - 1) * out.stride1 + d_v, op,
            fmt::format("out.stride0 must be >= (heads - 1) · stride1 + d_v = {}, got {}",
                        (heads - 1) * out.stride1 + d_v, out.stride0));
  }
  ops::launch_merge_attention_kernel(out, lse, lse_row_stride, part_out, part_lse,
                                     part_lse_row_stride, rows, heads, d_v, stream);
}

}  // namespace mla::kernels
