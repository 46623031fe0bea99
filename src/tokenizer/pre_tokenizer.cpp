// The pre-tokenizer's regexes on PCRE2 (see pre_tokenizer.h). Subjects are validated UTF-8, so
// matching passes PCRE2_NO_UTF_CHECK: without it PCRE2 would re-check the whole piece on every
// call, which makes splitting quadratic in the piece length.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode_additions.h"
#include "tokenizer/utf8.h"

namespace mla::tokenizer {

bool replace_newer_characters(std::string_view text, std::string& out) {
  const std::span<const NewerCharacterRange> ranges = newer_character_ranges();
  bool replaced = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const int length = utf8_prefix_at(text, pos).needed;
    const char32_t code_point = decode_utf8_at(text, pos, length);
    if (code_point >= ranges.front().first) {
      const auto range = std::upper_bound(
          ranges.begin(), ranges.end(), code_point,
          [](char32_t value, const NewerCharacterRange& entry) { return value < entry.first; });
      if (range != ranges.begin() && code_point <= std::prev(range)->last) {
        if (!replaced) out.assign(text);
        replaced = true;
        std::string stand_in;
        append_utf8(stand_in, std::prev(range)->stand_in);
        out.replace(pos, stand_in.size(), stand_in);
      }
    }
    pos += length;
  }
  return replaced;
}

std::string with_unicode_white_space(std::string_view pattern) {
  std::string result;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      result.push_back(pattern[i]);
      continue;
    }
    // An escape is two characters; copying them as a pair keeps `\\s` (a backslash, then s) as is.
    const char escaped = pattern[++i];
    if (escaped == 's') {
      result += "\\p{White_Space}";
    } else if (escaped == 'S') {
      result += "\\P{White_Space}";
    } else {
      result.push_back('\\');
      result.push_back(escaped);
    }
  }
  return result;
}

void SplitRegex::CodeDeleter::operator()(pcre2_real_code_8* code) const {
  pcre2_code_free(code);
}

SplitRegex::SplitRegex(const std::string& pattern, const std::string& where) {
  const std::string rewritten = with_unicode_white_space(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw_error("{}: the regex '{}' does not compile with PCRE2: {} (at offset {} of '{}')", where,
                pattern, reinterpret_cast<const char*>(message), error_offset, rewritten);
  }
  code_.reset(code);
  // JIT is an optimisation only: where it is unavailable PCRE2 falls back to its interpreter.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

void SplitRegex::split_isolated(std::string_view text,
                                std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
  if (match == nullptr) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t piece_start = 0;  // start of the stretch not yet cut into pieces
  size_t search_from = 0;
  while (search_from < text.size()) {
    const int rc = pcre2_match(code_.get(), subject, text.size(), search_from, PCRE2_NO_UTF_CHECK,
                               match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw_error("pre-tokenizer regex failed on a {}-byte piece: {}", text.size(),
                  reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t match_start = ovector[0], match_end = ovector[1];
    if (match_end == match_start) {
      // An empty match makes an empty piece, which is dropped; step over one code point.
      search_from = match_start + utf8_prefix_at(text, match_start).needed;
      continue;
    }
    if (match_start > piece_start)
      pieces.push_back(text.substr(piece_start, match_start - piece_start));
    pieces.push_back(text.substr(match_start, match_end - match_start));
    piece_start = search_from = match_end;
  }
  if (piece_start < text.size()) pieces.push_back(text.substr(piece_start));
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::string with_stand_ins;
  const std::string_view subject =
      replace_newer_characters(text, with_stand_ins) ? std::string_view(with_stand_ins) : text;
  std::vector<std::string_view> pieces;
  if (!subject.empty()) pieces.push_back(subject);
  std::vector<std::string_view> next;
  for (const SplitRegex& regex : splits_) {
    next.clear();
    for (std::string_view piece : pieces) regex.split_isolated(piece, next);
    pieces.swap(next);
  }
  // Pieces of the copy become the same stretches of the original.
  for (std::string_view& piece : pieces)
    piece = text.substr(static_cast<size_t>(piece.data() - subject.data()), piece.size());
  return pieces;
}

}  // namespace mla::tokenizer
