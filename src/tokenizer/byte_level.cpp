// The byte-level alphabet (see byte_level.h), computed once into two small tables.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace mla::tokenizer {
namespace {

bool stands_for_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

struct Alphabet {
  std::array<char32_t, 256> char_of_byte{};
  // Every stand-in is below U+0144 (0x100 + 68); -1 marks characters outside the alphabet.
  std::array<int, 0x144> byte_of_char{};
};

const Alphabet& alphabet() {
  static const Alphabet table = [] {
    Alphabet result;
    result.byte_of_char.fill(-1);
    char32_t next_stand_in = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      const char32_t c = stands_for_itself(byte) ? char32_t(byte) : next_stand_in++;
      result.char_of_byte[byte] = c;
      result.byte_of_char[c] = byte;
    }
    return result;
  }();
  return table;
}

}  // namespace

char32_t byte_level_char(unsigned char byte) {
  return alphabet().char_of_byte[byte];
}

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const Alphabet& table = alphabet();
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const int length = utf8_prefix_at(token, pos).needed;
    const char32_t c = decode_utf8_at(token, pos, length);
    if (c >= table.byte_of_char.size() || table.byte_of_char[c] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(table.byte_of_char[c]));
    pos += length;
  }
  return bytes;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string token;
  for (char byte : bytes) append_utf8(token, byte_level_char(static_cast<unsigned char>(byte)));
  return token;
}

}  // namespace mla::tokenizer
