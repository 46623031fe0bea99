// Integers from the environment: the measuring knobs (MLA_DECODE_*, MLA_BENCH_*) that callers read
// once per process. A malformed value is the user's mistake, so it throws mla::Error naming the
// variable, the accepted range and the text found; it never falls back silently.
#pragma once

#include <cstdint>
#include <optional>

namespace mla {

// The whole decimal integer in environment variable `name` (an optional '-', then digits; nothing
// else, no spaces), or nothing when the variable is unset or empty. Throws mla::Error when it is
// not such an integer or lies outside [min_value, max_value].
std::optional<int64_t> integer_from_environment(const char* name, int64_t min_value,
                                                int64_t max_value);

}  // namespace mla
