// Host bf16 conversion: round to nearest even, NaN and infinities preserved.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtypes.h"

namespace mla {
namespace {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

TEST(Bf16, ExactValuesRoundTrip) {
  for (float value : {0.f, 1.f, -2.5f, 0.15625f, 3.0e38f, -1.0e-30f}) {
    const float rounded = round_to_bf16(value);
    EXPECT_EQ(round_to_bf16(rounded), rounded);
  }
  EXPECT_EQ(float_to_bf16(1.f).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.f).bits, 0xc000);
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)).bits, 0x3f80);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up to even.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)).bits, 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)).bits, 0x3f81);
  // Just below halfway rounds down.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)).bits, 0x3f80);
}

TEST(Bf16, SpecialValues) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(INFINITY)), INFINITY);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-INFINITY)), -INFINITY);
  // The largest float rounds to +inf in bf16 (it is past bf16's largest finite value + half ulp).
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max())), INFINITY);
}

}  // namespace
}  // namespace mla
