// The streaming detokenizer and random round trips: pieces are always whole UTF-8 characters and
// concatenate to decode(all ids), for the fixture's texts, for id sequences that break
// characters, and for seeded random Unicode strings (which must also survive encode → decode).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/cpu/tokenizer_test_support.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"

namespace mla::tokenizer {
namespace {

using testing::deepseek_v3;
using testing::fixture;
using testing::ids_of;

// Streams `ids`, checks every piece is valid UTF-8, and returns the concatenation.
std::string stream(const std::vector<int32_t>& ids, bool skip_special_tokens) {
  StreamingDetokenizer detokenizer(deepseek_v3(), skip_special_tokens);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = detokenizer.push(id);
    EXPECT_EQ(find_invalid_utf8(piece), std::nullopt) << "after id " << id;
    text += piece;
  }
  const std::string rest = detokenizer.finish();
  EXPECT_EQ(find_invalid_utf8(rest), std::nullopt);
  return text + rest;
}

TEST(StreamingDetokenizer, HoldsBackAnEmojiSplitAcrossTokens) {
  const Tokenizer& tokenizer = deepseek_v3();
  // " 😀" is two tokens: 'ĠðŁĺ' (a space and three of the emoji's four bytes), then 'Ģ'.
  const std::vector<int32_t> ids = tokenizer.encode("Hello 😀", false);
  ASSERT_EQ(ids.size(), 3u);
  StreamingDetokenizer detokenizer(tokenizer);
  EXPECT_EQ(detokenizer.push(ids[0]), "Hello");
  EXPECT_EQ(detokenizer.push(ids[1]), " ");
  EXPECT_EQ(detokenizer.push(ids[2]), "😀");
  EXPECT_EQ(detokenizer.finish(), "");
}

TEST(StreamingDetokenizer, UnfinishedCharacterBecomesReplacementAtFinish) {
  const Tokenizer& tokenizer = deepseek_v3();
  const std::vector<int32_t> ids = tokenizer.encode("Hello 😀", false);
  StreamingDetokenizer detokenizer(tokenizer);
  EXPECT_EQ(detokenizer.push(ids[0]), "Hello");
  EXPECT_EQ(detokenizer.push(ids[1]), " ");
  EXPECT_EQ(detokenizer.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{ids[0], ids[1]}), "Hello \xEF\xBF\xBD");
  // After finish() the detokenizer starts afresh.
  EXPECT_EQ(detokenizer.push(ids[0]), "Hello");
}

TEST(StreamingDetokenizer, PiecesConcatenateToDecodeForEveryFixtureCase) {
  const Tokenizer& tokenizer = deepseek_v3();
  for (const auto& entry : fixture()["encode"]) {
    const std::vector<int32_t> ids = ids_of(entry["ids_with_bos"]);
    EXPECT_EQ(stream(ids, false), tokenizer.decode(ids));
    EXPECT_EQ(stream(ids, true), tokenizer.decode(ids, true));
  }
  for (const auto& entry : fixture()["decode"]) {
    SCOPED_TRACE(entry["ids"].dump());
    EXPECT_EQ(stream(ids_of(entry["ids"]), false), entry["text"].get<std::string>());
    EXPECT_EQ(stream(ids_of(entry["ids"]), true), entry["text_skip_special"].get<std::string>());
  }
}

// A random string of code points, drawn mostly from ranges where tokens split characters
// (emoji, CJK, combining marks) and sometimes with a special token or whitespace run inside.
std::string random_text(std::mt19937& rng) {
  struct Range {
    char32_t first, last;
  };
  static const std::vector<Range> ranges = {
      {0x20, 0x7E},     {0x09, 0x0D},       {0xA0, 0x24F},      {0x300, 0x36F},
      {0x370, 0x4FF},   {0x600, 0x6FF},     {0x900, 0x97F},     {0x3040, 0x30FF},
      {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},   {0x1F300, 0x1FAFF}, {0x200B, 0x200F},
      {0xFE00, 0xFE0F}, {0x1F3FB, 0x1F3FF}, {0x1, 0xD7FF},      {0xE000, 0x10FFFF},
  };
  static const std::vector<std::string> specials = {"<｜begin▁of▁sentence｜>", "<｜User｜>",
                                                    "<｜Assistant｜>", "<|EOT|>", "   \n\t"};
  std::string text;
  const int length = std::uniform_int_distribution<int>(0, 40)(rng);
  for (int i = 0; i < length; ++i) {
    if (std::uniform_int_distribution<int>(0, 30)(rng) == 0) {
      text += specials[rng() % specials.size()];
      continue;
    }
    const Range range = ranges[rng() % ranges.size()];
    char32_t code_point = std::uniform_int_distribution<char32_t>(range.first, range.last)(rng);
    if (code_point >= 0xD800 && code_point <= 0xDFFF) code_point = 0xFFFD;
    append_utf8(text, code_point);
  }
  return text;
}

TEST(StreamingDetokenizer, RandomUnicodeRoundTrips) {
  const Tokenizer& tokenizer = deepseek_v3();
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string text = random_text(rng);
    const std::vector<int32_t> ids = tokenizer.encode(text, false);
    ASSERT_EQ(tokenizer.decode(ids), text) << "trial " << trial;
    ASSERT_EQ(stream(ids, false), tokenizer.decode(ids)) << "trial " << trial;
  }
}

TEST(StreamingDetokenizer, RandomIdsNeverSplitACharacter) {
  const Tokenizer& tokenizer = deepseek_v3();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> ids(std::uniform_int_distribution<int>(1, 16)(rng));
    for (int32_t& id : ids)
      id = std::uniform_int_distribution<int32_t>(0, tokenizer.vocab_size() + 5)(rng);
    ASSERT_EQ(stream(ids, false), tokenizer.decode(ids)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace mla::tokenizer
