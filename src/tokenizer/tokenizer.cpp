// Encoding and decoding with a loaded Tokenizer (loading is in tokenizer_load.cpp).
#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace mla::tokenizer {

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  if (const std::optional<size_t> bad = find_invalid_utf8(text))
    throw_error("the text to encode is not valid UTF-8: byte 0x{:02x} at offset {} of {}",
                static_cast<unsigned char>(text[*bad]), *bad, text.size());
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  if (add_bos) {
    if (bos_id_ < 0)
      throw_error("asked to add BOS, but no bos_token is set for {} (tokenizer_config.json: {})",
                  path_, config_.path.empty() ? "none found" : config_.path);
    ids.push_back(bos_id_);
  }
  for (const TextSegment& segment : added_tokens_.split(text)) {
    if (segment.added_token_id >= 0) {
      ids.push_back(segment.added_token_id);
      continue;
    }
    for (std::string_view piece : pre_tokenizer_.split(segment.text)) bpe_.encode_piece(piece, ids);
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids)
    if (contains(id) && !(skip_special_tokens && special_[id])) bytes += token_bytes_[id];
  std::string text;
  append_utf8_lossy(text, bytes);
  return text;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  return contains(id) ? std::string_view(token_bytes_[id]) : std::string_view();
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  return contains(id) ? std::string_view(tokens_[id]) : std::string_view();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto found = ids_by_token_.find(token);
  if (found == ids_by_token_.end()) return std::nullopt;
  return found->second;
}

}  // namespace mla::tokenizer
