// Helpers shared by the GPU tests: skip cleanly without an sm_90 GPU, and compare with the
// reference the way the tolerances say.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/device.h"

namespace mla::testing {

// GTEST_SKIP()s the calling test when there is no sm_90 GPU; use as the first line of a test.
#define MLA_REQUIRE_SM90_GPU()                                                           \
  do {                                                                                   \
    if (::mla::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine"; \
    if (::mla::cuda::current_device_info().compute_major != 9)                           \
      GTEST_SKIP() << "needs an sm_90 GPU (H100/H200)";                                  \
  } while (0)

struct Comparison {
  double relative_l2 = 0;       // ‖got − want‖ / ‖want‖ over finite reference values
  double max_lse_relative = 0;  // max |lse − ref| / max(1, |ref|)
  size_t nan_count = 0;         // NaNs in out or lse (never allowed)
  size_t inf_mismatch = 0;      // lse infinite in one and not (or with another sign) in the other
};

inline Comparison compare_decode(const std::vector<float>& out, const std::vector<float>& out_ref,
                                 const std::vector<float>& lse, const std::vector<float>& lse_ref) {
  Comparison c;
  double err = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) ++c.nan_count;
    const double d = double(out[i]) - out_ref[i];
    err += d * d;
    norm += double(out_ref[i]) * out_ref[i];
  }
  c.relative_l2 = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isnan(lse[i])) {
      ++c.nan_count;
      continue;
    }
    if (std::isinf(lse_ref[i]) || std::isinf(lse[i])) {
      if (lse[i] != lse_ref[i]) ++c.inf_mismatch;
      continue;
    }
    c.max_lse_relative =
        std::max(c.max_lse_relative, std::fabs(double(lse[i]) - lse_ref[i]) /
                                         std::max(1.0, std::fabs(double(lse_ref[i]))));
  }
  return c;
}

}  // namespace mla::testing
