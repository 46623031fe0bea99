// UTF-8 helpers for the tokenizer: validation, lossy decoding, and the incomplete tail that a
// streaming detokenizer must hold back.
//
// The subtle thing: invalid bytes become U+FFFD one "maximal subpart" at a time (Unicode §3.9,
// the rule Rust's String::from_utf8_lossy and Python's errors="replace" follow), so "E2 82 41"
// gives one U+FFFD then "A", not two. Because a lead byte always starts a new attempt, decoding
// a byte stream in pieces cut just before a lead byte gives the same text as decoding it whole.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mla::tokenizer {

// The sequence that starts at bytes[pos]: `needed` bytes in all (0 if bytes[pos] cannot start
// one), of which the first `valid` are present and well-formed (valid == needed: a whole code
// point; valid < needed: an invalid or cut-off sequence to replace by one U+FFFD).
struct Utf8Prefix {
  int needed = 0;
  int valid = 0;
};
Utf8Prefix utf8_prefix_at(std::string_view bytes, size_t pos);

// Byte offset of the first ill-formed sequence, or nullopt when `bytes` is valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view bytes);

// Appends `bytes` to `out`, each ill-formed maximal subpart replaced by U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);

// How many trailing bytes (0..3) are the well-formed start of a code point that more bytes could
// still complete.
size_t incomplete_utf8_tail(std::string_view bytes);

void append_utf8(std::string& out, char32_t code_point);

// The code point of the well-formed sequence at bytes[pos] (the caller has validated it).
char32_t decode_utf8_at(std::string_view bytes, size_t pos, int length);

// Unicode's White_Space property (what Rust's char::is_whitespace tests).
bool is_white_space(char32_t code_point);

}  // namespace mla::tokenizer
