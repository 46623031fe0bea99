// Characters Unicode assigned (or re-categorised) after version 14.0, the version whose tables
// PCRE2 10.42 carries, up to 16.0, the version the reference `tokenizers` uses. PCRE2 calls them
// unassigned, so `\p{L}`, `\p{P}`, `\p{S}` and friends would not match them and text with newer
// emoji (U+1FAE8 🫨) or scripts would be split differently from the reference.
//
// The subtle thing: instead of patching the regexes, the pre-tokenizer matches on a copy of the
// text in which each such character is replaced by a stand-in that PCRE2 knows, with the same
// general category and the same UTF-8 length. Offsets are unchanged, so the pieces are cut from
// the original text at the same places. Scripts (\p{Han}) and explicit ranges in a pattern do
// not see the real character; DeepSeek's regexes use neither for these characters.
#pragma once

#include <span>

namespace mla::tokenizer {

struct NewerCharacterRange {
  char32_t first;
  char32_t last;
  char32_t stand_in;  // same general category and UTF-8 length, known to Unicode 14.0
};

// Sorted by code point, non-overlapping (generated: unicode_additions.cpp). The replacement
// itself is replace_newer_characters in pre_tokenizer.h.
std::span<const NewerCharacterRange> newer_character_ranges();

}  // namespace mla::tokenizer
