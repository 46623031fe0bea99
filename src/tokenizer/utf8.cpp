// UTF-8 helpers (see utf8.h). The byte ranges follow Table 3-7 of the Unicode Standard
// ("Well-Formed UTF-8 Byte Sequences").
#include "tokenizer/utf8.h"

namespace mla::tokenizer {
namespace {

bool is_continuation(unsigned char byte) {
  return (byte & 0xC0) == 0x80;
}

}  // namespace

Utf8Prefix utf8_prefix_at(std::string_view bytes, size_t pos) {
  const auto lead = static_cast<unsigned char>(bytes[pos]);
  if (lead < 0x80) return {1, 1};
  int needed = 0;
  // The allowed range of the second byte narrows for E0, ED, F0 and F4 (no overlong forms, no
  // surrogates, nothing past U+10FFFF); every other continuation byte is 80..BF.
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 3;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return {0, 0};
  }
  int valid = 1;
  while (valid < needed && pos + valid < bytes.size()) {
    const auto byte = static_cast<unsigned char>(bytes[pos + valid]);
    const bool ok = valid == 1 ? byte >= second_min && byte <= second_max : is_continuation(byte);
    if (!ok) break;
    ++valid;
  }
  return {needed, valid};
}

std::optional<size_t> find_invalid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Prefix prefix = utf8_prefix_at(bytes, pos);
    if (prefix.needed == 0 || prefix.valid < prefix.needed) return pos;
    pos += prefix.needed;
  }
  return std::nullopt;
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Prefix prefix = utf8_prefix_at(bytes, pos);
    if (prefix.needed > 0 && prefix.valid == prefix.needed) {
      out.append(bytes.substr(pos, prefix.needed));
      pos += prefix.needed;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      pos += prefix.valid > 0 ? prefix.valid : 1;
    }
  }
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  // Only the last lead byte can start an unfinished sequence; it lies within the last 3 bytes.
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const size_t pos = bytes.size() - back;
    if (is_continuation(static_cast<unsigned char>(bytes[pos]))) continue;
    const Utf8Prefix prefix = utf8_prefix_at(bytes, pos);
    const bool unfinished =
        prefix.needed > static_cast<int>(back) && prefix.valid == static_cast<int>(back);
    return unfinished ? back : 0;
  }
  return 0;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

char32_t decode_utf8_at(std::string_view bytes, size_t pos, int length) {
  const auto lead = static_cast<unsigned char>(bytes[pos]);
  if (length == 1) return lead;
  char32_t code_point = lead & (0x7F >> length);
  for (int i = 1; i < length; ++i)
    code_point = (code_point << 6) | (static_cast<unsigned char>(bytes[pos + i]) & 0x3F);
  return code_point;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace mla::tokenizer
