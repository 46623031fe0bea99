// Out-of-line part of src/core/error.h.
#include "core/error.h"

namespace mla {

void throw_internal_error(const char* file, int line, const std::string& what) {
  throw InternalError(
      fmt::format("internal error at {}:{}: {} (this is a bug in mla.cpp)", file, line, what));
}

}  // namespace mla
