// The dense per-token ops (mla/kernels/ops.h) against their CPU twins, on random inputs rounded to
// the element type the kernel sees: both ScalarTypes, odd sizes (cols 7, 576, 2051), padded row
// strides (aligned ones take the 8-wide vector path, others the scalar path), in-place variants,
// broadcast copies, NaN-poisoned padding and cache rows that must stay untouched, and ±inf LSEs.
//
// Every buffer starts as NaN; the comparison covers the whole allocation, so a write outside the
// op's elements (padding, skipped cache rows) or a read of one (NaN in an output) both fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/ops.h"
#include "ref/attention_merge.h"
#include "ref/fused_ops.h"
#include "ref/ops.h"
#include "ref/rope.h"

namespace mla {
namespace {

using kernels::ScalarType;
using kernels::Strided2D;
using kernels::Strided3D;

constexpr ScalarType kTypes[] = {ScalarType::kF32, ScalarType::kBF16};
constexpr float kEps = 1e-6f;

const char* name(ScalarType type) {
  return type == ScalarType::kBF16 ? "bf16" : "f32";
}

float round_to(ScalarType type, float value) {
  return type == ScalarType::kBF16 ? round_to_bf16(value) : value;
}

// `count` elements of `type` on the device, uploaded from floats (rounded to the type).
class DeviceArray {
 public:
  DeviceArray(ScalarType type, const std::vector<float>& values)
      : type_(type), count_(values.size()), buffer_(values.size() * element_size(type)) {
    std::vector<uint8_t> host(buffer_.size());
    for (size_t i = 0; i < count_; ++i) {
      if (type_ == ScalarType::kF32) {
        std::memcpy(host.data() + 4 * i, &values[i], 4);
      } else {
        const bf16 b = float_to_bf16(values[i]);
        std::memcpy(host.data() + 2 * i, &b, 2);
      }
    }
    buffer_.copy_from_host(host);
  }
  void* data() const { return buffer_.data(); }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(buffer_.data());
  }
  // The element at `offset` elements, as a pointer (for views that start inside the buffer).
  void* at(int64_t offset) const { return buffer_.data() + offset * element_size(type_); }
  std::vector<float> download() const {
    const std::vector<uint8_t> host = buffer_.to_host();
    std::vector<float> values(count_);
    for (size_t i = 0; i < count_; ++i) {
      if (type_ == ScalarType::kF32) {
        std::memcpy(&values[i], host.data() + 4 * i, 4);
      } else {
        bf16 b;
        std::memcpy(&b, host.data() + 2 * i, 2);
        values[i] = bf16_to_float(b);
      }
    }
    return values;
  }

 private:
  static size_t element_size(ScalarType type) { return type == ScalarType::kBF16 ? 2 : 4; }
  ScalarType type_;
  size_t count_;
  cuda::DeviceBuffer<uint8_t> buffer_;
};

template <typename T>
cuda::DeviceBuffer<T> upload(const std::vector<T>& values) {
  cuda::DeviceBuffer<T> buffer(values.size());
  buffer.copy_from_host(values);
  return buffer;
}

// [rows, cols] normal values (times `scale`) rounded to `type`, in a NaN buffer of row stride
// `stride` (padding NaN).
std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t stride, ScalarType type,
                                 uint32_t seed, float scale = 1.f, float mean = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, scale);
  std::vector<float> values(static_cast<size_t>(rows * stride), NAN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) values[r * stride + c] = round_to(type, normal(rng));
  return values;
}

std::vector<float> nan_buffer(int64_t count) {
  return std::vector<float>(count, NAN);
}

// |got − want| <= abs + rel·|want| (+ one bf16 ulp of want, |want|/128, when the output is bf16
// and the reference is unrounded fp32: the kernel's fp32 value may round to the other neighbour).
struct Tolerance {
  double abs = 0, rel = 0;
  bool bf16_output = false;
};
constexpr double kBf16Ulp = 1.0 / 128;

Tolerance fp32_math(ScalarType out, double rel = 1e-5, double abs = 1e-6) {
  return {abs, rel, out == ScalarType::kBF16};
}
constexpr Tolerance kExact{0, 0, false};

// Compares whole buffers: NaN where the reference is NaN (untouched), infinities equal, the rest
// within tolerance. Reports the first few mismatches.
::testing::AssertionResult buffers_match(const std::vector<float>& got,
                                         const std::vector<float>& want, Tolerance tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else {
      const double allowed =
          tol.abs + tol.rel * std::fabs(w) + (tol.bf16_output ? kBf16Ulp * std::fabs(w) : 0.0);
      ok = std::fabs(g - w) <= allowed;  // false for a NaN got
    }
    if (!ok && ++bad <= 5)
      first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " +
               std::to_string(w) + ";";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " differ:" << first;
}

void sync() {
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
}

struct Shape {
  int64_t cols, stride;
};
// 7: scalar, warp per row; 576: vector (aligned padding) and scalar (odd padding), warp per row;
// 2048: vector, block per row; 2051: scalar, block per row.
constexpr Shape kShapes[] = {{7, 7},     {7, 13},      {576, 576},   {576, 584},
                             {576, 581}, {2048, 2064}, {2051, 2051}, {2051, 2060}};

std::vector<float> norm_weight(int64_t cols, uint32_t seed) {
  return random_matrix(1, cols, cols, ScalarType::kBF16, seed, 0.2f, 1.f);
}

TEST(OpsGpu, Embedding) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t vocab = 300;
  const std::vector<int32_t> ids = {5, 299, 0, -1, 300, 17, 17, 123, 250, 2};  // -1, 300: zeros
  const int64_t tokens = ids.size();
  const auto d_ids = upload(ids);
  for (const Shape& s : {Shape{7, 9}, Shape{576, 584}, Shape{2051, 2051}})
    for (ScalarType out_type : kTypes) {
      SCOPED_TRACE(std::to_string(s.cols) + " " + name(out_type));
      const std::vector<float> table = random_matrix(vocab, s.cols, s.cols, ScalarType::kBF16, 1);
      DeviceArray d_table(ScalarType::kBF16, table), d_out(out_type, nan_buffer(tokens * s.stride));
      kernels::launch_embedding(d_table.as<bf16>(), vocab, s.cols, d_ids.data(), tokens,
                                {d_out.data(), out_type, s.stride}, nullptr);
      std::vector<float> want = nan_buffer(tokens * s.stride);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t c = 0; c < s.cols; ++c)
          want[t * s.stride + c] = ids[t] >= 0 && ids[t] < vocab ? table[ids[t] * s.cols + c] : 0.f;
      EXPECT_TRUE(buffers_match(d_out.download(), want, kExact));
    }
}

TEST(OpsGpu, RmsNorm) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 37;  // not a multiple of the 8 rows a block takes with a warp per row
  for (const Shape& s : kShapes)
    for (ScalarType x_type : kTypes)
      for (ScalarType out_type : kTypes)
        for (bool in_place : {false, true}) {
          if (in_place && out_type != x_type) continue;
          SCOPED_TRACE(std::to_string(s.cols) + "/" + std::to_string(s.stride) + " " +
                       name(x_type) + " -> " + name(out_type) + (in_place ? " in place" : ""));
          const std::vector<float> x = random_matrix(rows, s.cols, s.stride, x_type, 2, 3.f);
          const std::vector<float> weight = norm_weight(s.cols, 3);
          DeviceArray d_x(x_type, x), d_weight(ScalarType::kBF16, weight);
          DeviceArray d_out(out_type, nan_buffer(rows * s.stride));
          const DeviceArray& out = in_place ? d_x : d_out;
          kernels::launch_rms_norm({d_x.data(), x_type, s.stride}, d_weight.as<bf16>(), rows,
                                   s.cols, kEps, {out.data(), out_type, s.stride}, nullptr);
          std::vector<float> want = nan_buffer(rows * s.stride);
          ref::rms_norm(x.data(), s.stride, weight.data(), rows, s.cols, kEps, want.data(),
                        s.stride);
          // fp32 sums of squares in another order than the twin's double: a few fp32 ulps.
          EXPECT_TRUE(buffers_match(out.download(), want, fp32_math(out_type)));
        }
}

TEST(OpsGpu, AddRmsNorm) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 37;
  for (const Shape& s : kShapes)
    for (ScalarType delta_type : kTypes)
      for (ScalarType out_type : kTypes)
        for (bool out_is_delta : {false, true}) {
          if (out_is_delta && out_type != delta_type) continue;
          SCOPED_TRACE(std::to_string(s.cols) + "/" + std::to_string(s.stride) + " " +
                       name(delta_type) + " -> " + name(out_type) +
                       (out_is_delta ? " over delta" : ""));
          const std::vector<float> residual =
              random_matrix(rows, s.cols, s.stride, ScalarType::kF32, 4, 4.f);
          const std::vector<float> delta = random_matrix(rows, s.cols, s.stride, delta_type, 5);
          const std::vector<float> weight = norm_weight(s.cols, 6);
          DeviceArray d_residual(ScalarType::kF32, residual), d_delta(delta_type, delta);
          DeviceArray d_weight(ScalarType::kBF16, weight);
          DeviceArray d_out(out_type, nan_buffer(rows * s.stride));
          const DeviceArray& out = out_is_delta ? d_delta : d_out;
          kernels::launch_add_rms_norm(
              d_residual.as<float>(), s.stride, {d_delta.data(), delta_type, s.stride},
              d_weight.as<bf16>(), rows, s.cols, kEps, {out.data(), out_type, s.stride}, nullptr);
          std::vector<float> want_residual = residual, want_out = nan_buffer(rows * s.stride);
          ref::add_rms_norm(want_residual.data(), s.stride, delta.data(), s.stride, weight.data(),
                            rows, s.cols, kEps, want_out.data(), s.stride);
          // The residual update is one fp32 add on both sides: bit for bit.
          EXPECT_TRUE(buffers_match(d_residual.download(), want_residual, kExact));
          EXPECT_TRUE(buffers_match(out.download(), want_out, fp32_math(out_type)));
        }
}

TEST(OpsGpu, Add) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 5;
  for (const Shape& s : {Shape{7, 13}, Shape{576, 584}, Shape{576, 581}, Shape{2051, 2051}})
    for (ScalarType x_type : kTypes)
      for (ScalarType y_type : kTypes)
        for (bool self : {false, true}) {
          if (self && y_type != x_type) continue;
          SCOPED_TRACE(std::to_string(s.cols) + "/" + std::to_string(s.stride) + " " +
                       name(x_type) + " += " + name(y_type) + (self ? " (itself)" : ""));
          const std::vector<float> x = random_matrix(rows, s.cols, s.stride, x_type, 7);
          const std::vector<float> y =
              self ? x : random_matrix(rows, s.cols, s.stride + 8, y_type, 8);
          const int64_t y_stride = self ? s.stride : s.stride + 8;
          DeviceArray d_x(x_type, x), d_y(y_type, y);
          kernels::launch_add({d_x.data(), x_type, s.stride},
                              {self ? d_x.data() : d_y.data(), y_type, y_stride}, rows, s.cols,
                              nullptr);
          std::vector<float> want = x;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < s.cols; ++c)
              want[r * s.stride + c] = round_to(x_type, x[r * s.stride + c] + y[r * y_stride + c]);
          // One fp32 add, then the same rounding: bit for bit.
          EXPECT_TRUE(buffers_match(d_x.download(), want, kExact));
        }
}

TEST(OpsGpu, SiluMul) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 6;
  for (const Shape& s : {Shape{7, 7}, Shape{576, 584}, Shape{576, 581}, Shape{2051, 2060}})
    for (ScalarType gate_type : kTypes)
      for (ScalarType up_type : kTypes)
        for (ScalarType out_type : kTypes)
          for (bool over_gate : {false, true}) {
            if (over_gate && out_type != gate_type) continue;
            SCOPED_TRACE(std::to_string(s.cols) + "/" + std::to_string(s.stride) + " " +
                         name(gate_type) + " " + name(up_type) + " -> " + name(out_type) +
                         (over_gate ? " over gate" : ""));
            const std::vector<float> gate =
                random_matrix(rows, s.cols, s.stride, gate_type, 9, 4.f);
            const std::vector<float> up = random_matrix(rows, s.cols, s.stride, up_type, 10);
            DeviceArray d_gate(gate_type, gate), d_up(up_type, up);
            DeviceArray d_out(out_type, nan_buffer(rows * s.stride));
            const DeviceArray& out = over_gate ? d_gate : d_out;
            kernels::launch_silu_mul({d_gate.data(), gate_type, s.stride},
                                     {d_up.data(), up_type, s.stride}, rows, s.cols,
                                     {out.data(), out_type, s.stride}, nullptr);
            std::vector<float> want = nan_buffer(rows * s.stride);
            for (int64_t r = 0; r < rows; ++r)
              ref::silu_mul(gate.data() + r * s.stride, up.data() + r * s.stride, s.cols,
                            want.data() + r * s.stride);
            // expf (≤ 2 ulp) and one division against the twin's double.
            EXPECT_TRUE(buffers_match(out.download(), want, fp32_math(out_type)));
          }
}

TEST(OpsGpu, CopyConvertsAndBroadcasts) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t d0 = 3, d1 = 5;
  for (int64_t d2 : {7, 576, 2051})
    for (int broadcast = 0; broadcast < 4; ++broadcast)  // none, dim 0, dim 1, both
      for (ScalarType src_type : kTypes)
        for (ScalarType dst_type : kTypes) {
          SCOPED_TRACE(std::to_string(d2) + " broadcast " + std::to_string(broadcast) + " " +
                       name(src_type) + " -> " + name(dst_type));
          const int64_t src_stride1 = broadcast & 2 ? 0 : d2 + 8;
          const int64_t src_stride0 = broadcast & 1 ? 0 : d1 * (d2 + 8) + 16;
          const int64_t src_count = (d0 - 1) * src_stride0 + (d1 - 1) * src_stride1 + d2;
          const std::vector<float> src = random_matrix(1, src_count, src_count, src_type, 11);
          const int64_t dst_stride1 = d2 + 8, dst_stride0 = d1 * dst_stride1 + 8;
          DeviceArray d_src(src_type, src), d_dst(dst_type, nan_buffer(d0 * dst_stride0));
          kernels::launch_copy({d_src.data(), src_type, src_stride0, src_stride1},
                               {d_dst.data(), dst_type, dst_stride0, dst_stride1}, d0, d1, d2,
                               nullptr);
          std::vector<float> want = nan_buffer(d0 * dst_stride0);
          for (int64_t i = 0; i < d0; ++i)
            for (int64_t j = 0; j < d1; ++j)
              for (int64_t k = 0; k < d2; ++k)
                want[i * dst_stride0 + j * dst_stride1 + k] =
                    round_to(dst_type, src[i * src_stride0 + j * src_stride1 + k]);
          EXPECT_TRUE(buffers_match(d_dst.download(), want, kExact));
        }
}

TEST(OpsGpu, GatherRows) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t x_rows = 20;
  const std::vector<int32_t> rows = {19, 0, 3, 3, 7, 19, 11, 2, 0, 5, 13};
  const int64_t count = rows.size();
  const auto d_rows = upload(rows);
  for (const Shape& s : {Shape{7, 9}, Shape{576, 584}, Shape{2051, 2051}})
    for (ScalarType x_type : kTypes)
      for (ScalarType out_type : kTypes) {
        SCOPED_TRACE(std::to_string(s.cols) + " " + name(x_type) + " -> " + name(out_type));
        const std::vector<float> x = random_matrix(x_rows, s.cols, s.stride, x_type, 12);
        const int64_t out_stride = s.cols;
        DeviceArray d_x(x_type, x), d_out(out_type, nan_buffer(count * out_stride));
        kernels::launch_gather_rows({d_x.data(), x_type, s.stride}, d_rows.data(), count, s.cols,
                                    {d_out.data(), out_type, out_stride}, nullptr);
        std::vector<float> want = nan_buffer(count * out_stride);
        for (int64_t i = 0; i < count; ++i)
          for (int64_t c = 0; c < s.cols; ++c)
            want[i * out_stride + c] = round_to(out_type, x[rows[i] * s.stride + c]);
        EXPECT_TRUE(buffers_match(d_out.download(), want, kExact));
      }
}

ref::RopeParams yarn_rope(int rotary_dim) {
  ref::RopeParams rope;
  rope.rotary_dim = rotary_dim;
  rope.yarn = true;
  rope.factor = 40;
  rope.original_max_position_embeddings = 4096;
  return rope;
}

std::vector<int32_t> random_positions(int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> position(0, 163839);
  std::vector<int32_t> positions(tokens);
  for (int32_t& p : positions) p = position(rng);
  positions[0] = 0;
  if (tokens > 1) positions[1] = 163839;
  if (tokens > 2) positions[2] = 4096;
  return positions;
}

TEST(OpsGpu, RopeInterleavedPairsInPlace) {
  MLA_REQUIRE_SM90_GPU();
  struct Layout {
    int64_t heads, head_stride, offset, token_stride;
    int rotary_dim;
  };
  const Layout layouts[] = {
      {16, 192, 128, 16 * 192 + 8, 64},  // q_pe inside q [T, 16, 192], padded tokens
      {1, 576, 512, 576, 64},            // k_pe inside kv_a [T, 576]
      {3, 6, 0, 18, 6},                  // small and dense
      {5, 10, 2, 53, 8},                 // odd strides
  };
  const int64_t tokens = 33;
  const std::vector<int32_t> positions = random_positions(tokens, 13);
  const auto d_positions = upload(positions);
  for (const Layout& l : layouts)
    for (ScalarType type : kTypes) {
      SCOPED_TRACE(std::to_string(l.heads) + " heads, rotary " + std::to_string(l.rotary_dim) +
                   " " + name(type));
      const std::vector<float> inv_freq = ref::rope_inverse_frequencies(yarn_rope(l.rotary_dim));
      const auto d_inv_freq = upload(inv_freq);
      // Only the rotary values are finite: everything else is NaN and must stay so.
      std::vector<float> x = nan_buffer(tokens * l.token_stride);
      std::mt19937 rng(14);
      std::normal_distribution<float> normal(0.f, 2.f);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < l.heads; ++h)
          for (int j = 0; j < l.rotary_dim; ++j)
            x[t * l.token_stride + h * l.head_stride + l.offset + j] = round_to(type, normal(rng));
      DeviceArray d_x(type, x);
      kernels::launch_rope(d_x.at(l.offset), type, tokens, l.token_stride, l.heads, l.head_stride,
                           l.rotary_dim, d_positions.data(), d_inv_freq.data(), 0.9f, nullptr);
      std::vector<float> want = x;
      ref::apply_rope(want.data() + l.offset, tokens, l.token_stride, l.heads, l.head_stride,
                      l.rotary_dim, positions.data(), inv_freq.data(), 0.9f);
      // Same fp32 angle; sincosf is within 2 ulp of the twin's rounded double cos/sin.
      EXPECT_TRUE(buffers_match(d_x.download(), want, fp32_math(type, 1e-5, 1e-5)));
    }
}

// Out of place (what the model does for the decode rows: q_pe inside the fused projection's
// output, rotated straight into the pe slice of the absorbed query): strided source and
// destination views of their own layouts, every type pair, positions starting inside the step's
// array. The twin is a copy into the destination's layout, then the in-place twin there. The
// source must come out unchanged, and every element of the destination outside its rotary values
// (NaN) must stay untouched.
TEST(OpsGpu, RopeOutOfPlaceStridedViews) {
  MLA_REQUIRE_SM90_GPU();
  struct Layout {
    int64_t heads, rotary_dim;
    int64_t x_token_stride, x_head_stride, x_offset;
    int64_t out_token_stride, out_head_stride, out_offset;
  };
  const Layout layouts[] = {
      // V2-Lite decode: q_pe of q [T, 16·192 + 576] (fused row) -> q_absorbed [T, 16, 576] pe.
      {16, 64, 16 * 192 + 576, 192, 128, 16 * 576, 576, 512},
      // V3-like: 128 heads (more heads than a block's head groups).
      {128, 64, 128 * 192 + 8, 192, 128, 128 * 576, 576, 512},
      {1, 64, 672, 0, 96 + 512, 64, 0, 0},  // rank-2 view (one head) into a dense [T, 64]
      {5, 8, 53, 10, 2, 47, 9, 1},          // odd strides and offsets on both sides
  };
  const int64_t tokens = 29, first_token = 4;  // rows [4, 33) of a 33-row step
  std::vector<int32_t> positions = random_positions(first_token + tokens, 19);
  positions[first_token] = 163839;  // the extremes on the rows that are rotated
  positions[first_token + 1] = 0;
  const auto d_positions = upload(positions);
  for (const Layout& l : layouts)
    for (ScalarType x_type : kTypes)
      for (ScalarType out_type : kTypes) {
        SCOPED_TRACE(std::to_string(l.heads) + " heads, rotary " + std::to_string(l.rotary_dim) +
                     " " + name(x_type) + " -> " + name(out_type));
        const std::vector<float> inv_freq =
            ref::rope_inverse_frequencies(yarn_rope(static_cast<int>(l.rotary_dim)));
        const auto d_inv_freq = upload(inv_freq);
        const int64_t x_count = tokens * l.x_token_stride + l.x_offset + l.rotary_dim;
        const int64_t out_count = tokens * l.out_token_stride + l.out_offset + l.rotary_dim;
        std::vector<float> x = nan_buffer(x_count);
        std::mt19937 rng(20);
        std::normal_distribution<float> normal(0.f, 2.f);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t h = 0; h < l.heads; ++h)
            for (int64_t j = 0; j < l.rotary_dim; ++j)
              x[t * l.x_token_stride + h * l.x_head_stride + l.x_offset + j] =
                  round_to(x_type, normal(rng));
        DeviceArray d_x(x_type, x), d_out(out_type, nan_buffer(out_count));
        kernels::launch_rope(
            {d_x.at(l.x_offset), x_type, l.x_token_stride, l.x_head_stride},
            {d_out.at(l.out_offset), out_type, l.out_token_stride, l.out_head_stride}, tokens,
            l.heads, static_cast<int>(l.rotary_dim), d_positions.data() + first_token,
            d_inv_freq.data(), 0.9f, nullptr);
        std::vector<float> want = nan_buffer(out_count);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t h = 0; h < l.heads; ++h)
            for (int64_t j = 0; j < l.rotary_dim; ++j)
              want[t * l.out_token_stride + h * l.out_head_stride + l.out_offset + j] =
                  x[t * l.x_token_stride + h * l.x_head_stride + l.x_offset + j];
        ref::apply_rope(want.data() + l.out_offset, tokens, l.out_token_stride, l.heads,
                        l.out_head_stride, static_cast<int>(l.rotary_dim),
                        positions.data() + first_token, inv_freq.data(), 0.9f);
        // Same fp32 angle; sincosf is within 2 ulp of the twin's rounded double cos/sin; a bf16
        // output may round the fp32 value to the other neighbour (fp32_math's one ulp).
        EXPECT_TRUE(buffers_match(d_out.download(), want, fp32_math(out_type, 1e-5, 1e-5)));
        EXPECT_TRUE(buffers_match(d_x.download(), x, kExact)) << "the source changed";
      }
}

TEST(OpsGpu, LatentCacheWrite) {
  MLA_REQUIRE_SM90_GPU();
  struct Case {
    int rank, rope_dim;
    int64_t kv_a_stride;
  };
  const int64_t tokens = 37, num_slots = 100;
  std::vector<int64_t> slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) slots[t] = (t * 37 + 11) % num_slots;  // distinct
  slots[3] = -1;
  slots[10] = -7;
  slots[20] = num_slots;  // past the end: skipped too
  slots[21] = num_slots - 1;
  slots[24] = -3;  // it held num_slots - 1 too: no two tokens may write one row
  const auto d_slots = upload(slots);
  const std::vector<int32_t> positions = random_positions(tokens, 15);
  const auto d_positions = upload(positions);
  for (const Case& c : {Case{512, 64, 576}, Case{512, 64, 592}, Case{7, 6, 15}})
    for (ScalarType kv_type : kTypes)
      for (int out_mode = 0; out_mode < 3; ++out_mode) {  // latent_out: none, f32, bf16
        const ScalarType out_type = out_mode == 2 ? ScalarType::kBF16 : ScalarType::kF32;
        SCOPED_TRACE(std::to_string(c.rank) + "+" + std::to_string(c.rope_dim) + " kv_a " +
                     name(kv_type) + " latent_out " + (out_mode == 0 ? "none" : name(out_type)));
        const int64_t latent_dim = c.rank + c.rope_dim;
        const int64_t cache_stride = latent_dim + 16, out_stride = latent_dim + 3;
        const std::vector<float> kv_a =
            random_matrix(tokens, latent_dim, c.kv_a_stride, kv_type, 16, 2.f);
        const std::vector<float> weight = norm_weight(c.rank, 17);
        const std::vector<float> inv_freq = ref::rope_inverse_frequencies(yarn_rope(c.rope_dim));
        const auto d_inv_freq = upload(inv_freq);
        DeviceArray d_kv_a(kv_type, kv_a), d_weight(ScalarType::kBF16, weight);
        DeviceArray d_cache(ScalarType::kBF16, nan_buffer(num_slots * cache_stride));
        DeviceArray d_out(out_type, nan_buffer(tokens * out_stride));

        kernels::LatentCacheWriteParams p;
        p.kv_a = {d_kv_a.data(), kv_type, c.kv_a_stride};
        p.kv_norm_weight = d_weight.as<bf16>();
        p.eps = kEps;
        p.kv_lora_rank = c.rank;
        p.rope_dim = c.rope_dim;
        p.positions = d_positions.data();
        p.inv_freq = d_inv_freq.data();
        p.cos_sin_scale = 1.1f;
        p.slots = d_slots.data();
        p.tokens = tokens;
        p.latent_out = {out_mode == 0 ? nullptr : d_out.data(), out_type, out_stride};
        p.cache = d_cache.as<bf16>();
        p.cache_slot_stride = cache_stride;
        p.num_slots = num_slots;
        kernels::launch_latent_cache_write(p, nullptr);

        std::vector<float> want_cache = nan_buffer(num_slots * cache_stride);
        std::vector<float> want_out = nan_buffer(tokens * out_stride);
        ref::LatentCacheWriteArgs a;
        a.kv_a = kv_a.data();
        a.kv_a_stride = c.kv_a_stride;
        a.kv_norm_weight = weight.data();
        a.eps = kEps;
        a.kv_lora_rank = c.rank;
        a.rope_dim = c.rope_dim;
        a.positions = positions.data();
        a.inv_freq = inv_freq.data();
        a.cos_sin_scale = 1.1f;
        a.slots = slots.data();
        a.tokens = tokens;
        a.latent_out = out_mode == 0 ? nullptr : want_out.data();
        a.latent_out_stride = out_stride;
        a.cache = want_cache.data();
        a.cache_slot_stride = cache_stride;
        a.num_slots = num_slots;
        ref::latent_cache_write(a);
        // The norm's fp32 reduction and sincosf, as in RmsNorm and Rope; the cache is bf16.
        EXPECT_TRUE(buffers_match(d_cache.download(), want_cache,
                                  fp32_math(ScalarType::kBF16, 1e-5, 1e-5)));
        if (out_mode != 0)
          EXPECT_TRUE(buffers_match(d_out.download(), want_out, fp32_math(out_type, 1e-5, 1e-5)));
        else
          EXPECT_TRUE(buffers_match(d_out.download(), nan_buffer(tokens * out_stride), kExact));
      }
}

TEST(OpsGpu, GatherLatentCache) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t num_slots = 64;
  const std::vector<int64_t> slots = {63, 0, 5, -5, 5, 31, 40, -1, 2};  // negative: zeros
  const int64_t count = slots.size();
  const auto d_slots = upload(slots);
  for (const Shape& s : {Shape{576, 576}, Shape{576, 592}, Shape{7, 11}, Shape{576, 583}})
    for (ScalarType out_type : kTypes) {
      SCOPED_TRACE(std::to_string(s.cols) + "/" + std::to_string(s.stride) + " -> " +
                   name(out_type));
      const std::vector<float> cache =
          random_matrix(num_slots, s.cols, s.stride, ScalarType::kBF16, 18);
      const int64_t out_stride = s.cols + 8;
      DeviceArray d_cache(ScalarType::kBF16, cache),
          d_out(out_type, nan_buffer(count * out_stride));
      kernels::launch_gather_latent_cache(d_cache.as<bf16>(), s.stride, s.cols, d_slots.data(),
                                          count, {d_out.data(), out_type, out_stride}, nullptr);
      std::vector<float> want = nan_buffer(count * out_stride);
      for (int64_t i = 0; i < count; ++i)
        for (int64_t c = 0; c < s.cols; ++c)
          want[i * out_stride + c] = slots[i] < 0 ? 0.f : cache[slots[i] * s.stride + c];
      EXPECT_TRUE(buffers_match(d_out.download(), want, kExact));
    }
}

TEST(OpsGpu, MergeAttentionIncludingEmptyParts) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 9, heads = 16, lse_stride = 20, part_lse_stride = 17;
  for (int64_t d_v : {512, 7})
    for (ScalarType out_type : kTypes)
      for (ScalarType part_type : kTypes) {
        SCOPED_TRACE(std::to_string(d_v) + " " + name(out_type) + " + " + name(part_type));
        const int64_t out_stride1 = d_v + 8, out_stride0 = heads * out_stride1 + 4;
        const int64_t part_stride1 = d_v, part_stride0 = heads * d_v;
        std::vector<float> out = nan_buffer(rows * out_stride0);
        std::vector<float> part = nan_buffer(rows * part_stride0);
        std::vector<float> lse = nan_buffer(rows * lse_stride);
        std::vector<float> part_lse = nan_buffer(rows * part_lse_stride);
        std::mt19937 rng(19);
        std::normal_distribution<float> normal(0.f, 1.f);
        std::uniform_real_distribution<float> lse_value(-5.f, 5.f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h) {
            // Cases by (r, h): 0 both parts; 1/3 out empty (-inf/+inf); 2/4 part empty; 5 both
            // -inf; 6 +inf and -inf; 7 the part 200 below (its fp32 weight underflows to 0).
            const int which = static_cast<int>((r * heads + h) % 8);
            float a = lse_value(rng), b = lse_value(rng);
            if (which == 1 || which == 5) a = -INFINITY;
            if (which == 3 || which == 6) a = INFINITY;
            if (which == 2 || which == 5 || which == 6) b = -INFINITY;
            if (which == 4) b = INFINITY;
            if (which == 7) b = a - 200.f;
            lse[r * lse_stride + h] = a;
            part_lse[r * part_lse_stride + h] = b;
            const bool a_empty = std::isinf(a), b_empty = std::isinf(b);
            for (int64_t d = 0; d < d_v; ++d) {
              // An empty part's values are garbage (NaN) and must not be read.
              out[r * out_stride0 + h * out_stride1 + d] =
                  a_empty ? NAN : round_to(out_type, normal(rng));
              part[r * part_stride0 + h * part_stride1 + d] =
                  b_empty ? NAN : round_to(part_type, normal(rng));
            }
          }
        DeviceArray d_out(out_type, out), d_part(part_type, part);
        DeviceArray d_lse(ScalarType::kF32, lse), d_part_lse(ScalarType::kF32, part_lse);
        kernels::launch_merge_attention(
            {d_out.data(), out_type, out_stride0, out_stride1}, d_lse.as<float>(), lse_stride,
            {d_part.data(), part_type, part_stride0, part_stride1}, d_part_lse.as<float>(),
            part_lse_stride, rows, heads, d_v, nullptr);
        std::vector<float> want_out = out, want_lse = lse;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < heads; ++h)
            ref::merge_attention_partial(want_out.data() + r * out_stride0 + h * out_stride1,
                                         want_lse.data() + r * lse_stride + h,
                                         part.data() + r * part_stride0 + h * part_stride1,
                                         part_lse[r * part_lse_stride + h], static_cast<int>(d_v));
        // fp32 expf/logf (2 ulp) against the twin's double; outputs are sums of two weighted
        // values that may cancel, hence an absolute term of a few ulps of the inputs (|v| < 5).
        EXPECT_TRUE(buffers_match(d_out.download(), want_out, fp32_math(out_type, 1e-5, 1e-5)));
        EXPECT_TRUE(buffers_match(d_lse.download(), want_lse, fp32_math(ScalarType::kF32)));
      }
}

// The ops capture into a CUDA graph (no allocation, no synchronisation) and replay correctly.
TEST(OpsGpu, CaptureInCudaGraph) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 4, cols = 576;
  const std::vector<float> residual = random_matrix(rows, cols, cols, ScalarType::kF32, 20, 3.f);
  const std::vector<float> delta = random_matrix(rows, cols, cols, ScalarType::kBF16, 21);
  const std::vector<float> weight = norm_weight(cols, 22);
  DeviceArray d_residual(ScalarType::kF32, residual), d_delta(ScalarType::kBF16, delta);
  DeviceArray d_weight(ScalarType::kBF16, weight),
      d_out(ScalarType::kBF16, nan_buffer(rows * cols));
  DeviceArray d_gated(ScalarType::kBF16, nan_buffer(rows * cols));
  sync();

  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  kernels::launch_add_rms_norm(d_residual.as<float>(), cols,
                               {d_delta.data(), ScalarType::kBF16, cols}, d_weight.as<bf16>(), rows,
                               cols, kEps, {d_out.data(), ScalarType::kBF16, cols}, stream);
  kernels::launch_silu_mul({d_out.data(), ScalarType::kBF16, cols},
                           {d_delta.data(), ScalarType::kBF16, cols}, rows, cols,
                           {d_gated.data(), ScalarType::kBF16, cols}, stream);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<float> want_residual = residual, want_out(rows * cols), want_gated(rows * cols);
  ref::add_rms_norm(want_residual.data(), cols, delta.data(), cols, weight.data(), rows, cols, kEps,
                    want_out.data(), cols);
  const std::vector<float> out = d_out.download();
  EXPECT_TRUE(buffers_match(d_residual.download(), want_residual, kExact));
  EXPECT_TRUE(buffers_match(out, want_out, fp32_math(ScalarType::kBF16)));
  // silu_mul's twin on the kernel's own bf16 norm output (the twin's may differ by a bf16 ulp).
  ref::silu_mul(out.data(), delta.data(), rows * cols, want_gated.data());
  EXPECT_TRUE(buffers_match(d_gated.download(), want_gated, fp32_math(ScalarType::kBF16)));

  MLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MLA_CUDA_CHECK(cudaGraphDestroy(graph));
  MLA_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mla
