// Added tokens (special tokens such as "<｜begin▁of▁sentence｜>" and the chat markers): they are
// cut out of the text before pre-tokenization, and each becomes its own id.
//
// The subtle thing: matching runs in two passes, as in the reference. Tokens with
// `normalized: false` are matched first on the raw text; tokens with `normalized: true` are
// matched only in the stretches that pass left (on normalized text, which is the raw text here:
// the supported normalizers are identities). Within a pass the leftmost match wins, and at one
// position the longest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mla::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;     // skipped by decode(..., skip_special_tokens = true)
  bool lstrip = false;      // the match swallows the whitespace to its left
  bool rstrip = false;      // ... and to its right
  bool normalized = false;  // matched in the second pass (see above)
};

// A stretch of text: an added token (added_token_id >= 0) or plain text to pre-tokenize (-1).
struct TextSegment {
  std::string_view text;
  int32_t added_token_id = -1;
};

class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);

  // `text` cut into segments, in order, none empty. With lstrip/rstrip a token's segment includes
  // the whitespace it swallowed (that whitespace is not encoded).
  std::vector<TextSegment> split(std::string_view text) const;

 private:
  // A byte trie over the contents of one pass's tokens.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token = -1;  // index into tokens_ of the token ending here
    };
    std::vector<Node> nodes{1};
    void insert(std::string_view content, int32_t token);
    // The longest token starting at text[pos]: its index and length, or {-1, 0}.
    std::pair<int32_t, size_t> longest_match(std::string_view text, size_t pos) const;
  };
  void split_pass(const Trie& trie, std::string_view text, std::vector<TextSegment>& out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_pass_;
  Trie normalized_pass_;
};

}  // namespace mla::tokenizer
