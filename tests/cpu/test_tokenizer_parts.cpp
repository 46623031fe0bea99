// The tokenizer's parts on their own: UTF-8 validation and lossy decoding (against the Unicode
// Standard's own example), the incomplete tail, the byte-level alphabet, the `\s` rewrite and the
// stand-ins for characters newer than PCRE2's Unicode, and the BPE merge order on a tiny
// synthetic tokenizer.
#include <gtest/gtest.h>

#include <string>

#include "tests/cpu/tokenizer_test_support.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_additions.h"
#include "tokenizer/utf8.h"

namespace mla::tokenizer {
namespace {

std::string lossy(std::string_view bytes) {
  std::string out;
  append_utf8_lossy(out, bytes);
  return out;
}

TEST(Utf8, LossyReplacesEachMaximalSubpart) {
  // Unicode Standard, Table 3-8: "61 F1 80 80 E1 80 C2 62 80 63 80 BF 64" decodes to
  // a, U+FFFD ×3, b, U+FFFD, c, U+FFFD ×2, d.
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + replacement + replacement + replacement + "b" + replacement + "c" + replacement +
                replacement + "d");
  EXPECT_EQ(lossy("\xE2\x82\x41"), replacement + "A");  // a cut-off sequence is one U+FFFD
  EXPECT_EQ(lossy("\xED\xA0\x80"), replacement + replacement + replacement);  // a surrogate
  EXPECT_EQ(lossy("\xC0\xAF"), replacement + replacement);                    // overlong '/'
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), replacement + replacement + replacement + replacement);
  EXPECT_EQ(lossy("h\xC3\xA9 \xF0\x9F\x98\x80"), "h\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("\xE4\xB8\xAD\xE6\x96\x87"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(find_invalid_utf8("a\xE4\xB8"), 1u);
}

TEST(Utf8, IncompleteTailIsOnlyAWellFormedUnfinishedStart) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F\x98\x80"), 0u);  // finished
  EXPECT_EQ(incomplete_utf8_tail("a\xE0\x80"), 0u);          // E0 80 can never be finished
  EXPECT_EQ(incomplete_utf8_tail("a\x80"), 0u);              // a stray continuation byte
  EXPECT_EQ(incomplete_utf8_tail("\xFF"), 0u);
}

TEST(ByteLevel, AlphabetRoundTripsEveryByte) {
  EXPECT_EQ(bytes_to_byte_level(" "), "\xC4\xA0");   // 'Ġ'
  EXPECT_EQ(bytes_to_byte_level("\n"), "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(bytes_to_byte_level("A~"), "A~");
  std::string all_bytes;
  for (int byte = 0; byte < 256; ++byte) all_bytes.push_back(static_cast<char>(byte));
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all_bytes)), all_bytes);
  EXPECT_EQ(byte_level_to_bytes("<｜User｜>"), std::nullopt);  // '｜' is not in the alphabet
}

TEST(PreTokenizer, WhiteSpaceEscapesAreRewrittenOutsideEscapedBackslashes) {
  EXPECT_EQ(with_unicode_white_space("\\s+(?!\\S)"), "\\p{White_Space}+(?!\\P{White_Space})");
  EXPECT_EQ(with_unicode_white_space("[^\\s\\d]"), "[^\\p{White_Space}\\d]");
  EXPECT_EQ(with_unicode_white_space("\\\\s"), "\\\\s");  // a backslash, then 's'
}

TEST(PreTokenizer, NewerCharactersGetStandInsOfTheSameLength) {
  std::string out = "untouched";
  EXPECT_FALSE(replace_newer_characters("plain text, 中文, 😀", out));
  EXPECT_EQ(out, "untouched");
  // U+1FAE8 (So, Unicode 15) and U+105C0 (Lo, Unicode 16) inside older text.
  const std::string text =
      "a\xF0\x9F\xAB\xA8"
      "b\xF0\x90\x97\x80";
  ASSERT_TRUE(replace_newer_characters(text, out));
  ASSERT_EQ(out.size(), text.size());
  EXPECT_EQ(out.substr(0, 1), "a");
  EXPECT_EQ(out.substr(5, 1), "b");
  EXPECT_NE(out.substr(1, 4), text.substr(1, 4));
  EXPECT_EQ(find_invalid_utf8(out), std::nullopt);
  const auto ranges = newer_character_ranges();
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LT(ranges[i - 1].last, ranges[i].first);
}

TEST(PreTokenizer, IsolatedSplitKeepsMatchesAndGaps) {
  SplitRegex regex("\\p{N}{1,3}", "test");
  std::vector<std::string_view> pieces;
  regex.split_isolated("ab12345cd6", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"ab", "123", "45", "cd", "6"}));
}

TEST(PreTokenizer, BadRegexNamesTheField) {
  try {
    SplitRegex regex("(unclosed", "tokenizer.json: pre_tokenizer.pattern.Regex");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("pre_tokenizer.pattern.Regex"), std::string::npos);
  }
}

TEST(Bpe, LowestRankMergesFirstAndEqualPairsMergeLeftFirst) {
  // Merges by rank: "a a" (0), "b c" (1), "aa b" (2). "aaa" merges its left pair first;
  // in "abc", "b c" outranks any merge with 'a'.
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  testing::write_file(dir / "tokenizer.json",
                      testing::tiny_tokenizer_json({{"a", "a"}, {"b", "c"}, {"aa", "b"}}).dump());
  const Tokenizer tokenizer = Tokenizer::load(dir.string());
  const int32_t a = 'a', b = 'b';
  const int32_t aa = *tokenizer.token_to_id("aa"), bc = *tokenizer.token_to_id("bc");
  const int32_t aab = *tokenizer.token_to_id("aab");
  EXPECT_EQ(tokenizer.encode("aaa", false), (std::vector<int32_t>{aa, a}));
  EXPECT_EQ(tokenizer.encode("abc", false), (std::vector<int32_t>{a, bc}));
  EXPECT_EQ(tokenizer.encode("aab", false), (std::vector<int32_t>{aab}));
  EXPECT_EQ(tokenizer.encode("aabc", false), (std::vector<int32_t>{aa, bc}));
  const int32_t space = ' ';  // the tiny vocabulary gives byte x the id x
  EXPECT_EQ(tokenizer.encode("aaaa b", false), (std::vector<int32_t>{aa, aa, space, b}));
}

}  // namespace
}  // namespace mla::tokenizer
