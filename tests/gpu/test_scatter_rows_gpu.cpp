// scatter_rows (Backend::write_latent_cache on the GPU) against a host loop: rows land at their
// index converted to bf16, negative indices write nothing, other rows keep their NaN poison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/scatter_rows.h"

namespace mla {
namespace {

TEST(ScatterRows, RowsLandAtTheirIndexAndNegativeIndicesAreSkipped) {
  MLA_REQUIRE_SM90_GPU();
  const int64_t rows = 37, cols = 576, src_stride = 600, dst_rows = 300, dst_stride = 576;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> src(rows * src_stride);
  for (float& v : src) v = normal(rng);
  // Distinct destinations from a shuffled table, every fourth row skipped.
  std::vector<int64_t> table(dst_rows);
  for (int64_t i = 0; i < dst_rows; ++i) table[i] = i;
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int64_t> indices(rows);
  for (int64_t r = 0; r < rows; ++r) indices[r] = r % 4 == 3 ? -1 : table[r];

  const bf16 nan = float_to_bf16(std::nanf(""));
  for (bool bf16_src : {false, true}) {
    SCOPED_TRACE(bf16_src ? "bf16 source" : "f32 source");
    std::vector<bf16> src_bf16(src.size());
    for (size_t i = 0; i < src.size(); ++i) src_bf16[i] = float_to_bf16(src[i]);
    cuda::DeviceBuffer<float> d_src_f32(src.size());
    cuda::DeviceBuffer<bf16> d_src_bf16(src.size());
    d_src_f32.copy_from_host(src);
    d_src_bf16.copy_from_host(src_bf16);
    cuda::DeviceBuffer<int64_t> d_indices(indices.size());
    d_indices.copy_from_host(indices);
    cuda::DeviceBuffer<bf16> d_dst(dst_rows * dst_stride);
    d_dst.copy_from_host(std::vector<bf16>(dst_rows * dst_stride, nan));

    kernels::ScatterRowsParams p;
    p.src = bf16_src ? static_cast<const void*>(d_src_bf16.data()) : d_src_f32.data();
    p.src_type = bf16_src ? kernels::ScalarType::kBF16 : kernels::ScalarType::kF32;
    p.src_row_stride = src_stride;
    p.indices = d_indices.data();
    p.rows = rows;
    p.cols = cols;
    p.dst = d_dst.data();
    p.dst_row_stride = dst_stride;
    p.num_dst_rows = dst_rows;
    kernels::launch_scatter_rows(p, nullptr);
    const std::vector<bf16> got = d_dst.to_host();

    std::vector<int64_t> source_of(dst_rows, -1);
    for (int64_t r = 0; r < rows; ++r)
      if (indices[r] >= 0) source_of[indices[r]] = r;
    int64_t written = 0;
    for (int64_t d = 0; d < dst_rows; ++d)
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t bits = got[d * dst_stride + c].bits;
        if (source_of[d] < 0) {
          ASSERT_TRUE(std::isnan(bf16_to_float(got[d * dst_stride + c]))) << d << "," << c;
          continue;
        }
        ASSERT_EQ(bits, float_to_bf16(src[source_of[d] * src_stride + c]).bits) << d << "," << c;
        ++written;
      }
    EXPECT_EQ(written, (rows - rows / 4) * cols);
  }
}

}  // namespace
}  // namespace mla
