// TextOutput: a choice's generated ids turned into text as they arrive, with stop strings.
//
// The subtle thing: text that could still be the start of a stop string is held back (the longest
// suffix that is a prefix of one), so a stream never shows text that a later token turns into a
// stop; a stop string is therefore always found inside the held-back text, never across what was
// already shown. The text of a stop ends just before the stop string (or after it, with
// include_stop). Pieces come from the StreamingDetokenizer, so they are whole UTF-8 characters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace mla::engine {

class TextOutput {
 public:
  // Without a tokenizer there is no text (and there can be no stop strings).
  TextOutput(const tokenizer::Tokenizer* tokenizer, std::vector<std::string> stop,
             bool skip_special_tokens, bool include_stop);

  struct Piece {
    std::string text;          // to show now
    bool stopped = false;      // a stop string was found: the text is final
    std::string matched_stop;  // which one
  };
  Piece push(int32_t id);
  // The held-back rest when the choice ends for another reason.
  std::string finish();

 private:
  Piece take(bool at_end);

  std::optional<tokenizer::StreamingDetokenizer> detokenizer_;
  std::vector<std::string> stop_;
  bool include_stop_;
  std::string pending_;  // decoded, not shown yet
};

}  // namespace mla::engine
