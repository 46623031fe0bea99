// Tokenizer: Hugging Face tokenizer.json byte-level BPE, as DeepSeek ships it (V3/R1), on the CPU.
//
//   Tokenizer tokenizer = Tokenizer::load("path/to/model");   // or .../tokenizer.json
//   std::vector<int32_t> ids = tokenizer.encode("Hello", /*add_bos=*/true);  // {0, 19923}
//   std::string text = tokenizer.decode(ids);  // "<｜begin▁of▁sentence｜>Hello"
//
// Encoding is: added tokens cut out of the text (added_tokens.h), the rest split by the
// pre-tokenizer's regexes (pre_tokenizer.h), each piece's bytes merged by BPE (bpe.h). Decoding
// maps each id to bytes (byte_level.h) and reads the whole byte string as UTF-8, replacing
// ill-formed bytes with U+FFFD. The subtle thing: the reference `tokenizers` library never adds
// BOS for this tokenizer.json (its post-processor is ByteLevel, which only trims offsets); the
// BOS comes from tokenizer_config.json's add_bos_token, which transformers' LlamaTokenizerFast
// honours. encode(text) follows tokenizer_config.json; encode(text, add_bos) says it outright.
// A Tokenizer is immutable after load: share one between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace mla::tokenizer {

// What mla.cpp uses from tokenizer_config.json (all empty/false when there is no such file).
struct TokenizerConfig {
  std::string path;  // the file read, or "" when there was none
  bool add_bos_token = false;
  std::string bos_token;      // the token's text, e.g. "<｜begin▁of▁sentence｜>"
  std::string eos_token;      // e.g. "<｜end▁of▁sentence｜>"
  std::string chat_template;  // the Jinja source (see chat_template.h)
};

class Tokenizer {
 public:
  // `path` is a directory holding tokenizer.json (and, optionally, tokenizer_config.json) or the
  // tokenizer.json file itself (a tokenizer_config.json beside it is read too). Throws mla::Error
  // naming the file and field for anything missing, malformed or unsupported.
  static Tokenizer load(const std::string& path);

  // The ids of `text` (UTF-8; mla::Error otherwise). Added and special tokens written in the text
  // become their ids. add_bos puts bos_id() first.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  std::vector<int32_t> encode(std::string_view text) const {
    return encode(text, config_.add_bos_token);
  }

  // The text of `ids`; ids outside the vocabulary are skipped, as the reference does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The bytes one id decodes to; empty for an id outside the vocabulary. The bytes of one token
  // may be part of a UTF-8 character (see StreamingDetokenizer).
  std::string_view token_bytes(int32_t id) const;
  // The token as tokenizer.json spells it ("Ġworld" for " world"); "" outside the vocabulary.
  std::string_view id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool contains(int32_t id) const { return id >= 0 && id < vocab_size() && known_[id]; }
  bool is_special(int32_t id) const { return contains(id) && special_[id]; }

  // One past the largest id (model vocabulary and added tokens together).
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }  // -1 when tokenizer_config.json names none
  int32_t eos_id() const { return eos_id_; }  // -1 when tokenizer_config.json names none
  const TokenizerConfig& config() const { return config_; }
  const std::string& path() const { return path_; }  // the tokenizer.json read

 private:
  explicit Tokenizer(BpeModel bpe) : bpe_(std::move(bpe)) {}
  friend class TokenizerLoader;

  std::string path_;
  TokenizerConfig config_;
  AddedTokenMatcher added_tokens_;
  PreTokenizer pre_tokenizer_;
  BpeModel bpe_;
  // Indexed by id: spelling, decoded bytes, whether the id exists, whether it is special.
  std::vector<std::string> tokens_;
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> known_;
  std::vector<uint8_t> special_;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_by_token_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

}  // namespace mla::tokenizer
