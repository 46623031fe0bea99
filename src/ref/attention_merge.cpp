// Log-sum-exp merge of partial attention results; see attention_merge.h.
#include "ref/attention_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mla::ref {

void merge_attention_partial(float* out_a, float* lse_a, const float* out_b, float lse_b,
                             int count) {
  const double a = std::isinf(*lse_a) ? -INFINITY : *lse_a;  // +inf (empty) counts as -inf
  const double b = std::isinf(lse_b) ? -INFINITY : lse_b;
  if (a == -INFINITY && b == -INFINITY) {
    std::fill(out_a, out_a + count, 0.f);
    *lse_a = -std::numeric_limits<float>::infinity();
    return;
  }
  const double m = std::max(a, b);
  const double wa = std::exp(a - m);
  const double wb = std::exp(b - m);
  const double total = wa + wb;
  for (int i = 0; i < count; ++i) {
    const double va = wa == 0.0 ? 0.0 : wa * out_a[i];
    const double vb = wb == 0.0 ? 0.0 : wb * out_b[i];
    out_a[i] = static_cast<float>((va + vb) / total);
  }
  *lse_a = static_cast<float>(m + std::log(total));
}

}  // namespace mla::ref
