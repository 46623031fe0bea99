// integer_from_environment(): see environment.h.
#include "core/environment.h"

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>

#include "core/error.h"

namespace mla {

std::optional<int64_t> integer_from_environment(const char* name, int64_t min_value,
                                                int64_t max_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view view(text);
  int64_t value = 0;
  const auto [end, status] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (status != std::errc() || end != view.data() + view.size() || value < min_value ||
      value > max_value) {
    throw_error("{} must be an integer in [{}, {}], got '{}'", name, min_value, max_value, view);
  }
  return value;
}

}  // namespace mla
