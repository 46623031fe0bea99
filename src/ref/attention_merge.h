// Merging two partial attention results over disjoint key sets by their log-sum-exp.
//
// m = max(a, b); out = (e^(a-m)·out_a + e^(b-m)·out_b) / (e^(a-m) + e^(b-m)); lse = m + ln(...).
// A part that saw no key has lse = -inf (or +inf, the decode op's convention for seqlen 0): both
// count as empty. If both parts are empty, out = 0 and lse = -inf.
#pragma once

namespace mla::ref {

// Merges `count` values of part b into part a, in place (out_a is the result).
void merge_attention_partial(float* out_a, float* lse_a, const float* out_b, float lse_b,
                             int count);

}  // namespace mla::ref
