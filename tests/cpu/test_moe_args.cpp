// Boundary validation of the MoE router (host only, no GPU needed): the appended (folded shared)
// experts fit the router's one-lane-per-pair limit, and a bad count is refused with a message
// naming it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "mla/kernels/moe.h"

namespace mla::kernels {
namespace {

MoeRouteParams v3_routing() {
  return {256, 8, 8, 4, MoeScoring::kSigmoid, MoeTopk::kNoauxTc, true, 2.5f, true};
}

void check(const MoeRouteParams& p) {
  // Fake, aligned device addresses: the check reads none of them.
  check_moe_route_args(reinterpret_cast<const float*>(0x10000), p.num_experts + 3, 5, p,
                       reinterpret_cast<const int32_t*>(0x20000),
                       reinterpret_cast<const float*>(0x30000));
}

TEST(MoeRouteArgs, AppendedExpertsUpToTheLaneLimit) {
  MoeRouteParams p = v3_routing();
  EXPECT_EQ(p.appended_experts, 0);  // aggregate initialisation leaves them off
  EXPECT_NO_THROW(check(p));
  p.appended_experts = 1;  // V3's shared expert
  EXPECT_NO_THROW(check(p));
  p.appended_experts = kMoeMaxTopK - p.top_k;
  EXPECT_NO_THROW(check(p));
  for (int bad : {kMoeMaxTopK - p.top_k + 1, -1}) {
    p.appended_experts = bad;
    try {
      check(p);
      ADD_FAILURE() << "appended_experts " << bad << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("appended_experts"), std::string::npos)
          << error.what();
    }
  }
}

}  // namespace
}  // namespace mla::kernels
