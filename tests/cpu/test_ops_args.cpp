// The dense ops' host side without a GPU: the vector-path and row-shape choices, and the boundary
// validation (every bad call below throws before anything is launched; empty problems launch
// nothing, so they return even here).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/ops/ops_host.h"
#include "mla/kernels/ops.h"

namespace mla {
namespace {

using kernels::ScalarType;
using kernels::Strided2D;
using kernels::Strided3D;

// Addresses that are never dereferenced: validation throws (or returns) before any launch.
void* fake(uintptr_t address) {
  return reinterpret_cast<void*>(address);
}
const bf16* fake_bf16(uintptr_t address) {
  return reinterpret_cast<const bf16*>(address);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OpsHost, VectorPathNeedsAlignedRowsOfWholeVectors) {
  using kernels::ops::vector_ok;
  EXPECT_TRUE(vector_ok(fake(0x1000), ScalarType::kBF16, 576, 576));
  EXPECT_TRUE(vector_ok(fake(0x1000), ScalarType::kF32, 4, 8));
  EXPECT_TRUE(vector_ok(fake(0x1000), ScalarType::kBF16, 0, 16));   // broadcast stride
  EXPECT_FALSE(vector_ok(fake(0x1000), ScalarType::kBF16, 7, 7));   // cols not a multiple of 8
  EXPECT_FALSE(vector_ok(fake(0x1008), ScalarType::kBF16, 8, 8));   // data 8-byte aligned only
  EXPECT_FALSE(vector_ok(fake(0x1000), ScalarType::kBF16, 12, 8));  // 24-byte rows
  EXPECT_FALSE(vector_ok(fake(0x1000), ScalarType::kF32, 10, 8));   // 40-byte rows
  EXPECT_TRUE(vector_ok(fake(0x1000), ScalarType::kF32, 12, 8));    // 48-byte rows
  EXPECT_FALSE(vector_ok(fake(0x1000), ScalarType::kF32, 2051, 2051));
}

TEST(OpsHost, NormsUseAWarpForShortRowsAndABlockForLongOnes) {
  using kernels::ops::norm_threads_per_row;
  EXPECT_EQ(norm_threads_per_row(7), 32);
  EXPECT_EQ(norm_threads_per_row(576), 32);
  EXPECT_EQ(norm_threads_per_row(1024), 32);
  EXPECT_EQ(norm_threads_per_row(1025), kernels::ops::kBlockThreads);
  EXPECT_EQ(norm_threads_per_row(7168), kernels::ops::kBlockThreads);
}

TEST(OpsHost, EmptyProblemsLaunchNothing) {
  const Strided2D none{nullptr, ScalarType::kBF16, 0};
  kernels::launch_rms_norm(none, nullptr, 0, 2048, 1e-6f, none, nullptr);
  kernels::launch_add_rms_norm(nullptr, 0, none, nullptr, 0, 2048, 1e-6f, none, nullptr);
  kernels::launch_add(none, none, 0, 7, nullptr);
  kernels::launch_silu_mul(none, none, 3, 0, none, nullptr);
  kernels::launch_copy({}, {}, 4, 0, 8, nullptr);
  kernels::launch_embedding(nullptr, 0, 2048, nullptr, 0, none, nullptr);
  kernels::launch_gather_rows(none, nullptr, 0, 16, none, nullptr);
  kernels::launch_rope(nullptr, ScalarType::kF32, 0, 64, 16, 64, 64, nullptr, nullptr, 1.f,
                       nullptr);
  kernels::LatentCacheWriteParams latent;
  kernels::launch_latent_cache_write(latent, nullptr);
  kernels::launch_gather_latent_cache(nullptr, 576, 576, nullptr, 0, none, nullptr);
  kernels::launch_merge_attention({}, nullptr, 0, {}, nullptr, 0, 0, 16, 512, nullptr);
}

TEST(OpsHost, BadArgumentsNameTheArgument) {
  const Strided2D x{fake(0x1000), ScalarType::kBF16, 576};
  const bf16* w = fake_bf16(0x2000);
  EXPECT_NE(error_of([&] {
              kernels::launch_rms_norm(x, w, -1, 576, 1e-6f, x, nullptr);
            }).find("rows must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rms_norm(x, nullptr, 2, 576, 1e-6f, x, nullptr);
            }).find("weight is null"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rms_norm({fake(0x1000), ScalarType::kBF16, 500}, w, 2, 576, 1e-6f, x,
                                       nullptr);
            }).find("x.row_stride must be >= cols (576), got 500"),
            std::string::npos);
  // In place only as the same view.
  EXPECT_NE(error_of([&] {
              kernels::launch_rms_norm(x, w, 2, 576, 1e-6f, {fake(0x1000), ScalarType::kF32, 576},
                                       nullptr);
            }).find("out aliases x"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rms_norm({fake(0x1001), ScalarType::kBF16, 576}, w, 2, 576, 1e-6f, x,
                                       nullptr);
            }).find("x.data must be 2-byte aligned"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rms_norm({fake(0x1000), static_cast<ScalarType>(7), 576}, w, 2, 576,
                                       1e-6f, x, nullptr);
            }).find("x.type must be kF32 or kBF16"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_add_rms_norm(static_cast<float*>(fake(0x1000)), 576, x, w, 2, 576,
                                           1e-6f, x, nullptr);
            }).find("must not be the residual"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_copy({fake(0x1000), ScalarType::kF32, -4, 0},
                                   {fake(0x2000), ScalarType::kF32, 8, 8}, 2, 1, 8, nullptr);
            }).find("src strides must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_copy({fake(0x1000), ScalarType::kF32, 0, 0},
                                   {fake(0x2000), ScalarType::kF32, 8, 4}, 2, 2, 8, nullptr);
            }).find("dst.stride1 must be >= d2 (8), got 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rope(fake(0x1000), ScalarType::kBF16, 4, 192, 1, 192, 63,
                                   static_cast<const int32_t*>(fake(0x2000)),
                                   static_cast<const float*>(fake(0x3000)), 1.f, nullptr);
            }).find("rotary_dim must be even"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rope(fake(0x1000), ScalarType::kBF16, 4, 64, 16, 64, 64,
                                   static_cast<const int32_t*>(fake(0x2000)),
                                   static_cast<const float*>(fake(0x3000)), 1.f, nullptr);
            }).find("token_stride must be >= (heads - 1)"),
            std::string::npos);
  // Out of place: out's heads and tokens must not overlap; in place only as the same view.
  const auto* positions = static_cast<const int32_t*>(fake(0x2000));
  const auto* inv_freq = static_cast<const float*>(fake(0x3000));
  const Strided3D q_pe{fake(0x1000), ScalarType::kBF16, 3648, 192};
  EXPECT_NE(error_of([&] {
              kernels::launch_rope(q_pe, {fake(0x8000), ScalarType::kBF16, 9216, 32}, 4, 16, 64,
                                   positions, inv_freq, 1.f, nullptr);
            }).find("out.stride1 must be >= rotary_dim (64), got 32"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rope(q_pe, {fake(0x8000), ScalarType::kBF16, 8000, 576}, 4, 16, 64,
                                   positions, inv_freq, 1.f, nullptr);
            }).find("out.stride0 must be >= (heads - 1)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rope(q_pe, {fake(0x1000), ScalarType::kF32, 3648, 192}, 4, 16, 64,
                                   positions, inv_freq, 1.f, nullptr);
            }).find("out aliases x"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_rope({fake(0x1000), ScalarType::kBF16, -3648, 192},
                                   {fake(0x8000), ScalarType::kBF16, 9216, 576}, 4, 16, 64,
                                   positions, inv_freq, 1.f, nullptr);
            }).find("x strides must be >= 0"),
            std::string::npos);
  kernels::launch_rope(q_pe, {nullptr, ScalarType::kF32, 0, 0}, 0, 16, 64, nullptr, nullptr, 1.f,
                       nullptr);  // no rows: nothing launched
  kernels::LatentCacheWriteParams latent;
  latent.kv_a = {fake(0x1000), ScalarType::kBF16, 576};
  latent.kv_norm_weight = w;
  latent.positions = static_cast<const int32_t*>(fake(0x3000));
  latent.inv_freq = static_cast<const float*>(fake(0x4000));
  latent.slots = static_cast<const int64_t*>(fake(0x5000));
  latent.tokens = 3;
  latent.cache = static_cast<bf16*>(fake(0x6000));
  latent.num_slots = 128;
  latent.cache_slot_stride = 512;
  EXPECT_NE(error_of([&] {
              kernels::launch_latent_cache_write(latent, nullptr);
            }).find("cache_slot_stride must be >= kv_lora_rank + rope_dim (576), got 512"),
            std::string::npos);
  latent.cache_slot_stride = 576;
  latent.slots = static_cast<const int64_t*>(fake(0x5004));
  EXPECT_NE(error_of([&] {
              kernels::launch_latent_cache_write(latent, nullptr);
            }).find("slots must be 8-byte aligned"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::launch_merge_attention({fake(0x1000), ScalarType::kF32, 512 * 16, 512},
                                              static_cast<float*>(fake(0x2000)), 8,
                                              {fake(0x3000), ScalarType::kF32, 512 * 16, 512},
                                              static_cast<const float*>(fake(0x4000)), 16, 4, 16,
                                              512, nullptr);
            }).find("lse_row_stride must be >= heads (16), got 8"),
            std::string::npos);
}

}  // namespace
}  // namespace mla
