// The device random fill writes exactly what its host twin computes.
#include <gtest/gtest.h>

#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/fill.h"

namespace mla {
namespace {

TEST(FillGpu, MatchesHostTwinBitForBit) {
  MLA_REQUIRE_SM90_GPU();
  const size_t count = (size_t(1) << 22) + 3;
  const kernels::RandomFillSpec spec{0x1234567890ull, 0.5f, 1.25f};
  cuda::DeviceBuffer<bf16> data(count);
  kernels::launch_fill_random_bf16(data.data(), count, spec, nullptr);
  const std::vector<bf16> got = data.to_host();
  size_t mismatches = 0;
  double sum = 0, sum_sq = 0;
  for (size_t i = 0; i < count; ++i) {
    const float want = kernels::random_fill_value(spec.seed, i, spec.scale(), spec.clip);
    if (got[i].bits != float_to_bf16(want).bits) ++mismatches;
    sum += want;
    sum_sq += double(want) * want;
  }
  EXPECT_EQ(mismatches, 0u);
  // And it is the distribution it claims: mean ≈ 0, std ≈ 0.5 (slightly less: clipped at 1.25).
  EXPECT_NEAR(sum / count, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_sq / count), 0.5, 0.03);
}

}  // namespace
}  // namespace mla
