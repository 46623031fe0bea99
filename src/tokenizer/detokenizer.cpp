// The streaming detokenizer (see detokenizer.h). Cutting the byte stream just before the lead
// byte of an unfinished character is safe: a lead byte is never part of the sequence before it,
// so lossy decoding of the two sides gives the same text as decoding them together.
#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace mla::tokenizer {

std::string StreamingDetokenizer::push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return "";
  pending_ += tokenizer_.token_bytes(id);
  const size_t ready = pending_.size() - incomplete_utf8_tail(pending_);
  std::string text;
  append_utf8_lossy(text, std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return text;
}

std::string StreamingDetokenizer::finish() {
  std::string text;
  append_utf8_lossy(text, pending_);
  pending_.clear();
  return text;
}

}  // namespace mla::tokenizer
