// Matching added tokens in text (see added_tokens.h). lstrip/rstrip follow the reference: the
// match extends over the whitespace (Unicode White_Space) next to it, but never back into the
// previous match. One difference at the edge: after an rstrip match the search resumes past the
// swallowed whitespace, where the reference could still start a token inside it.
#include "tokenizer/added_tokens.h"

#include "tokenizer/utf8.h"

namespace mla::tokenizer {
namespace {

// Bytes of White_Space that end at `end` (scanning left) or start at `start` (scanning right).
size_t white_space_before(std::string_view text, size_t begin, size_t end) {
  size_t pos = end;
  while (pos > begin) {
    size_t lead = pos - 1;
    while (lead > begin && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
    if (!is_white_space(decode_utf8_at(text, lead, static_cast<int>(pos - lead)))) break;
    pos = lead;
  }
  return end - pos;
}

size_t white_space_after(std::string_view text, size_t start) {
  size_t pos = start;
  while (pos < text.size()) {
    const int length = utf8_prefix_at(text, pos).needed;
    if (!is_white_space(decode_utf8_at(text, pos, length))) break;
    pos += length;
  }
  return pos - start;
}

}  // namespace

void AddedTokenMatcher::Trie::insert(std::string_view content, int32_t token) {
  int32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    int32_t child = -1;
    for (const auto& [edge, target] : nodes[node].children)
      if (edge == byte) child = target;
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(byte, child);
      nodes.emplace_back();
    }
    node = child;
  }
  nodes[node].token = token;
}

std::pair<int32_t, size_t> AddedTokenMatcher::Trie::longest_match(std::string_view text,
                                                                  size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [edge, target] : nodes[node].children)
      if (edge == byte) child = target;
    if (child < 0) break;
    node = child;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - pos};
  }
  return best;
}

void AddedTokenMatcher::add(const AddedToken& token) {
  const auto index = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
  (token.normalized ? normalized_pass_ : raw_pass_).insert(token.content, index);
}

void AddedTokenMatcher::split_pass(const Trie& trie, std::string_view text,
                                   std::vector<TextSegment>& out) const {
  size_t plain_start = 0;  // where the text not yet emitted begins
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [index, length] = trie.longest_match(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, end = pos + length;
    if (token.lstrip) start -= white_space_before(text, plain_start, start);
    if (token.rstrip) end += white_space_after(text, end);
    if (start > plain_start) out.push_back({text.substr(plain_start, start - plain_start), -1});
    out.push_back({text.substr(start, end - start), token.id});
    plain_start = pos = end;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<TextSegment> first_pass;
  split_pass(raw_pass_, text, first_pass);
  std::vector<TextSegment> segments;
  for (const TextSegment& segment : first_pass) {
    if (segment.added_token_id >= 0)
      segments.push_back(segment);
    else
      split_pass(normalized_pass_, segment.text, segments);
  }
  return segments;
}

}  // namespace mla::tokenizer
