// The pre-tokenizer: a sequence of Split regexes (PCRE2, UTF + UCP) that cut text into the pieces
// BPE encodes one by one, each regex applied to every piece the previous ones left.
//
// The subtle things: each regex sees only its piece, never the text around it (so a lookahead
// such as `\s+(?!\S)` stops at the piece's end); and two gaps between PCRE2 and the reference's
// Oniguruma are bridged: `\s`/`\S` are rewritten to Unicode's White_Space (PCRE2's own `\s` also
// matches U+180E MONGOLIAN VOWEL SEPARATOR), and characters newer than PCRE2's Unicode tables are
// matched through stand-ins (unicode_additions.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace mla::tokenizer {

// `pattern` with every `\s` and `\S` (outside and inside character classes) spelt as
// `\p{White_Space}` and `\P{White_Space}`.
std::string with_unicode_white_space(std::string_view pattern);

// When `text` (valid UTF-8) holds characters newer than PCRE2's Unicode tables
// (unicode_additions.h), `out` becomes a copy with each replaced by its stand-in and the result
// is true; otherwise `out` is left alone and the result is false.
bool replace_newer_characters(std::string_view text, std::string& out);

class SplitRegex {
 public:
  // Throws mla::Error naming `where` (the file and field) if PCRE2 rejects the pattern.
  SplitRegex(const std::string& pattern, const std::string& where);

  // Appends the pieces of `text` as the "Isolated" split behaviour makes them: every match and
  // every stretch between matches is a piece of its own; empty pieces are dropped.
  void split_isolated(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  std::unique_ptr<pcre2_real_code_8, CodeDeleter> code_;
};

class PreTokenizer {
 public:
  void add_split(SplitRegex regex) { splits_.push_back(std::move(regex)); }

  // The pieces of `text` (valid UTF-8, checked by the caller), in order; they are views into it.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  std::vector<SplitRegex> splits_;
};

}  // namespace mla::tokenizer
