// Boundary validation and launch shape of the prefill attention (host only, no GPU needed): each
// bad argument is rejected with a message naming it; the grid follows max_span_q_count.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "mla/kernels/prefill_attention.h"

namespace mla::kernels {
namespace {

template <typename T>
T* fake_pointer(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

PrefillAttentionParams valid_params() {
  PrefillAttentionParams p;
  p.num_q_rows = 1000;
  p.num_k_rows = 3000;
  p.num_heads = 16;
  p.softmax_scale = 0.1353f;
  p.q = fake_pointer<const bf16>(0x10000);
  p.k = fake_pointer<const bf16>(0x20000);
  p.v = fake_pointer<const bf16>(0x30000);
  p.out = fake_pointer<bf16>(0x40000);
  p.lse = fake_pointer<float>(0x50000);
  p.spans = fake_pointer<const AttentionSpanDevice>(0x60000);
  p.num_spans = 3;
  p.max_span_q_count = 513;
  p.set_contiguous_strides();
  return p;
}

void expect_rejected(const std::function<void(PrefillAttentionParams&)>& mutate,
                     const std::string& expected_text) {
  PrefillAttentionParams p = valid_params();
  mutate(p);
  try {
    check_prefill_attention_args(p);
    FAIL() << "expected an error mentioning \"" << expected_text << "\"";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(expected_text), std::string::npos)
        << "message: " << error.what();
  }
}

TEST(PrefillAttentionArgs, ValidParamsPass) {
  EXPECT_NO_THROW(check_prefill_attention_args(valid_params()));
  // The model's common view: v inside kv [rows, heads, 256] at offset 128.
  PrefillAttentionParams p = valid_params();
  p.v = fake_pointer<const bf16>(0x30000 + 128 * 2);
  p.v_row_stride = 16 * 256;
  p.v_head_stride = 256;
  EXPECT_NO_THROW(check_prefill_attention_args(p));
  // No rows: nothing to check beyond the shape.
  PrefillAttentionParams empty;
  empty.num_heads = 1;
  empty.softmax_scale = 1.f;
  EXPECT_NO_THROW(check_prefill_attention_args(empty));
}

TEST(PrefillAttentionArgs, ContiguousStrides) {
  const PrefillAttentionParams p = valid_params();
  EXPECT_EQ(p.q_row_stride, 16 * 192);
  EXPECT_EQ(p.q_head_stride, 192);
  EXPECT_EQ(p.v_row_stride, 16 * 128);
  EXPECT_EQ(p.out_row_stride, 16 * 128);
  EXPECT_EQ(p.lse_row_stride, 16);
}

TEST(PrefillAttentionArgs, RejectsBadShapes) {
  expect_rejected([](auto& p) { p.head_dim_qk = 576; }, "head_dim_qk must be 192");
  expect_rejected([](auto& p) { p.head_dim_v = 512; }, "head_dim_v must be 128");
  expect_rejected([](auto& p) { p.num_heads = 0; }, "num_heads");
  expect_rejected([](auto& p) { p.num_q_rows = -1; }, "num_q_rows");
  expect_rejected([](auto& p) { p.num_k_rows = -1; }, "num_k_rows");
  expect_rejected([](auto& p) { p.softmax_scale = 0.f; }, "softmax_scale");
  expect_rejected([](auto& p) { p.softmax_scale = std::nanf(""); }, "softmax_scale");
  expect_rejected([](auto& p) { p.num_spans = 70000; }, "num_spans");
  expect_rejected([](auto& p) { p.max_span_q_count = 1001; }, "max_span_q_count");
  expect_rejected([](auto& p) { p.max_span_q_count = -1; }, "max_span_q_count");
  expect_rejected([](auto& p) { p.spans = nullptr; }, "spans is null");
  expect_rejected([](auto& p) { p.tile_rows = 32; }, "tile_rows");
}

TEST(PrefillAttentionArgs, RejectsBadPointersAndStrides) {
  expect_rejected([](auto& p) { p.q = nullptr; }, "q is null");
  expect_rejected([](auto& p) { p.k = fake_pointer<const bf16>(0x20008); }, "k must be 16-byte");
  expect_rejected([](auto& p) { p.v = nullptr; }, "v is null");
  expect_rejected([](auto& p) { p.out = fake_pointer<bf16>(0x40002); }, "out must be 16-byte");
  expect_rejected([](auto& p) { p.lse = nullptr; }, "lse is null");
  expect_rejected([](auto& p) { p.q_row_stride = 16 * 192 + 4; }, "q_row_stride");
  expect_rejected([](auto& p) { p.k_head_stride = 196; }, "k_head_stride");
  expect_rejected([](auto& p) { p.v_row_stride = 12; }, "v_row_stride");
  expect_rejected([](auto& p) { p.out_head_stride = 120; }, "out_head_stride");
  expect_rejected([](auto& p) { p.out_row_stride = 15 * 128; }, "out_row_stride");
  expect_rejected([](auto& p) { p.lse_row_stride = 15; }, "lse_row_stride");
}

TEST(PrefillAttentionArgs, LaunchShape) {
  PrefillAttentionParams p = valid_params();
  PrefillLaunchShape shape = prefill_attention_launch_shape(p);
  EXPECT_EQ(shape.tile_rows, 128);  // automatic: spans longer than 128 rows
  EXPECT_EQ(shape.q_tiles, 5);      // ceil(513 / 128)
  EXPECT_EQ(shape.spans, 3);
  EXPECT_EQ(shape.heads, 16);
  EXPECT_EQ(shape.fill_blocks, 16);  // ceil(1000 / 64)
  p.max_span_q_count = 128;          // automatic: short spans take the 64-row shape
  p.num_q_rows = 128;
  shape = prefill_attention_launch_shape(p);
  EXPECT_EQ(shape.tile_rows, 64);
  EXPECT_EQ(shape.q_tiles, 2);
  EXPECT_EQ(shape.fill_blocks, 2);
  p.max_span_q_count = 0;
  EXPECT_EQ(prefill_attention_launch_shape(p).q_tiles, 0);
  p.max_span_q_count = 513;
  p.num_q_rows = 1000;
  p.tile_rows = 64;  // forced
  shape = prefill_attention_launch_shape(p);
  EXPECT_EQ(shape.tile_rows, 64);
  EXPECT_EQ(shape.q_tiles, 9);  // ceil(513 / 64)
}

}  // namespace
}  // namespace mla::kernels
