// mla::Error and the check macros: the two kinds of failure this project knows.
//
// User input that is wrong (a bad argument, a malformed file, a bad request) throws mla::Error with
// a message a person can act on: what was wrong, what was expected, what was found, and a hint.
// Our own broken invariant is a bug: MLA_CHECK* throws mla::InternalError naming file, line and
// both values, so a test fails loudly instead of a program crashing somewhere later.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mla {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

// Throws mla::Error with a formatted message: `throw_error("h_q must be 1..128, got {}", h_q)`.
template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void throw_internal_error(const char* file, int line, const std::string& what);

}  // namespace mla

// Invariant checks (bugs, not user errors). Both operands are printed on failure.
#define MLA_CHECK(cond)                                                                   \
  do {                                                                                    \
    if (!(cond)) ::mla::throw_internal_error(__FILE__, __LINE__, "check failed: " #cond); \
  } while (0)

#define MLA_CHECK_OP(a, op, b)                                                                  \
  do {                                                                                          \
    const auto& mla_check_a_ = (a);                                                             \
    const auto& mla_check_b_ = (b);                                                             \
    if (!(mla_check_a_ op mla_check_b_))                                                        \
      ::mla::throw_internal_error(__FILE__, __LINE__,                                           \
                                  fmt::format("check failed: {} {} {} ({} vs {})", #a, #op, #b, \
                                              mla_check_a_, mla_check_b_));                     \
  } while (0)

#define MLA_CHECK_EQ(a, b) MLA_CHECK_OP(a, ==, b)
#define MLA_CHECK_NE(a, b) MLA_CHECK_OP(a, !=, b)
#define MLA_CHECK_LT(a, b) MLA_CHECK_OP(a, <, b)
#define MLA_CHECK_LE(a, b) MLA_CHECK_OP(a, <=, b)
#define MLA_CHECK_GT(a, b) MLA_CHECK_OP(a, >, b)
#define MLA_CHECK_GE(a, b) MLA_CHECK_OP(a, >=, b)
