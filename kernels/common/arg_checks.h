// The launch functions' boundary checks (host code): each failure throws mla::Error with the
// message "<op>: <what is wrong, expected and actual>", so every kernel API words its errors
// alike. Shared by the decode, prefill-attention, MoE and elementwise-ops APIs.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace mla::kernels::arg_checks {

inline void require(bool ok, const char* op, const std::string& message) {
  if (!ok) throw Error(fmt::format("{}: {}", op, message));
}

inline bool aligned(const void* pointer, size_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

// Not null and `alignment`-byte aligned; `why` (e.g. " (its element size)") follows the
// alignment in the message.
inline void check_pointer(const char* op, const char* name, const void* pointer, size_t alignment,
                          const char* why = "") {
  require(pointer != nullptr, op, fmt::format("{} is null", name));
  require(
      aligned(pointer, alignment), op,
      fmt::format("{} must be {}-byte aligned{}, got address {}", name, alignment, why, pointer));
}

// Rows and heads must start 16-byte aligned (cp.async / vector stores of 8 bf16).
inline void check_stride(const char* op, const char* name, int64_t stride, int64_t minimum) {
  require(stride >= minimum && stride % 8 == 0, op,
          fmt::format("{} must be a multiple of 8 elements (16 bytes) and >= {}, got {}", name,
                      minimum, stride));
}

}  // namespace mla::kernels::arg_checks
