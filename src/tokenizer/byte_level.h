// The byte-level alphabet of GPT-2-style BPE (Hugging Face's ByteLevel pre-tokenizer and
// decoder): each of the 256 bytes has a printable stand-in character, and vocabulary tokens are
// spelt in those characters.
//
// The subtle thing: a token is decoded through the alphabet only if every one of its characters
// is in it; otherwise (added tokens such as "<｜User｜>") its own UTF-8 bytes are the output.
// That is what the reference ByteLevel decoder does, token by token.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mla::tokenizer {

// The stand-in for a byte: the 188 printable bytes (! .. ~, ¡ .. ¬, ® .. ÿ) stand for themselves,
// the other 68 take U+0100, U+0101, ... in byte order (so ' ' is 'Ġ' U+0120, '\n' is 'Ċ' U+010A).
char32_t byte_level_char(unsigned char byte);

// The bytes a token stands for, or nullopt if one of its characters is outside the alphabet.
// `token` must be valid UTF-8.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// The token spelling of raw bytes (the inverse of byte_level_to_bytes).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace mla::tokenizer
