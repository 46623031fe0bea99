// Incremental text with stop strings; see text_output.h.
#include "engine/text_output.h"

#include <algorithm>

namespace mla::engine {

TextOutput::TextOutput(const tokenizer::Tokenizer* tokenizer, std::vector<std::string> stop,
                       bool skip_special_tokens, bool include_stop)
    : stop_(std::move(stop)), include_stop_(include_stop) {
  if (tokenizer) detokenizer_.emplace(*tokenizer, skip_special_tokens);
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

TextOutput::Piece TextOutput::push(int32_t id) {
  if (!detokenizer_) return {};
  pending_ += detokenizer_->push(id);
  return take(/*at_end=*/false);
}

std::string TextOutput::finish() {
  if (!detokenizer_) return {};
  pending_ += detokenizer_->finish();
  return take(/*at_end=*/true).text;
}

TextOutput::Piece TextOutput::take(bool at_end) {
  Piece piece;
  size_t first = std::string::npos;
  const std::string* matched = nullptr;
  for (const std::string& stop : stop_) {
    const size_t at = pending_.find(stop);
    if (at < first) {
      first = at;
      matched = &stop;
    }
  }
  if (matched) {
    piece.text = pending_.substr(0, first) + (include_stop_ ? *matched : "");
    piece.stopped = true;
    piece.matched_stop = *matched;
    pending_.clear();
    return piece;
  }
  size_t hold = 0;
  if (!at_end)
    for (const std::string& stop : stop_)
      for (size_t length = std::min(stop.size() - 1, pending_.size()); length > hold; --length)
        if (pending_.compare(pending_.size() - length, length, stop, 0, length) == 0) {
          hold = length;
          break;
        }
  piece.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return piece;
}

}  // namespace mla::engine
