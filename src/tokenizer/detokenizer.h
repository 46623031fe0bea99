// StreamingDetokenizer: turns ids into text one id at a time, as a server streams them.
//
// The subtle thing: one token may end in the middle of a UTF-8 character (an emoji is often
// spread over two or three tokens), so the bytes of an unfinished character wait for the next
// ids and push() returns only whole characters. Ill-formed bytes become U+FFFD exactly as
// Tokenizer::decode makes them, so the pieces always concatenate to decode(all ids).
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace mla::tokenizer {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // The text `id` completes: whole UTF-8 characters only, possibly none ("").
  std::string push(int32_t id);

  // The rest, at the end of the stream: an unfinished character becomes U+FFFD. The object can
  // then start a new stream.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an unfinished character (at most 3)
};

}  // namespace mla::tokenizer
