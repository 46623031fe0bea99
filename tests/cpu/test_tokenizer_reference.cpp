// The DeepSeek-V3 tokenizer against the reference libraries (tests/data/tokenizer/fixture.json,
// written by tests/gen/gen_tokenizer_fixtures.py with `tokenizers` and transformers): ids with
// and without BOS, decoding (also of ids that split or break characters), chat template
// renderings, added tokens with lstrip/rstrip, and speed on 100 KB inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tests/cpu/tokenizer_test_support.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/utf8.h"

namespace mla::tokenizer {
namespace {

using testing::deepseek_v3;
using testing::fixture;
using testing::ids_of;

TEST(TokenizerReference, FixtureIsForThisTokenizer) {
  EXPECT_EQ(fixture()["tokenizer_json_sha256"].get<std::string>(),
            "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41");
  EXPECT_EQ(deepseek_v3().vocab_size(), 128815);
  EXPECT_EQ(deepseek_v3().bos_id(), 0);
  EXPECT_EQ(deepseek_v3().eos_id(), 1);
  EXPECT_TRUE(deepseek_v3().config().add_bos_token);
  EXPECT_GE(fixture()["encode"].size(), 80u);
}

TEST(TokenizerReference, EncodeMatchesEveryCorpusEntry) {
  const Tokenizer& tokenizer = deepseek_v3();
  for (const auto& entry : fixture()["encode"]) {
    const std::string text = entry["text"];
    SCOPED_TRACE(text.substr(0, 80));
    EXPECT_EQ(tokenizer.encode(text, false), ids_of(entry["ids"]));
    EXPECT_EQ(tokenizer.encode(text, true), ids_of(entry["ids_with_bos"]));
    // tokenizer_config.json's add_bos_token is true: the default adds BOS, as transformers does.
    EXPECT_EQ(tokenizer.encode(text), ids_of(entry["ids_with_bos"]));
  }
}

TEST(TokenizerReference, DecodeMatchesAndRoundTrips) {
  const Tokenizer& tokenizer = deepseek_v3();
  for (const auto& entry : fixture()["encode"]) {
    const std::string text = entry["text"];
    SCOPED_TRACE(text.substr(0, 80));
    const std::vector<int32_t> ids = ids_of(entry["ids"]);
    EXPECT_EQ(tokenizer.decode(ids), entry["decoded"].get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids, true), entry["decoded_skip_special"].get<std::string>());
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, false)), text);
  }
  for (const auto& entry : fixture()["decode"]) {
    SCOPED_TRACE(entry["ids"].dump());
    EXPECT_EQ(tokenizer.decode(ids_of(entry["ids"])), entry["text"].get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids_of(entry["ids"]), true),
              entry["text_skip_special"].get<std::string>());
  }
}

TEST(TokenizerReference, ChatTemplateRendersAsJinja) {
  const Tokenizer& tokenizer = deepseek_v3();
  const ChatTemplate chat = ChatTemplate::from_config(tokenizer.config());
  for (const auto& entry : fixture()["chat"]) {
    std::vector<ChatMessage> messages;
    for (const auto& message : entry["messages"])
      messages.push_back({message["role"], message["content"]});
    SCOPED_TRACE(entry["messages"].dump());
    const std::string text = chat.render(messages, entry["add_generation_prompt"]);
    EXPECT_EQ(text, entry["text"].get<std::string>());
    // The template writes BOS itself, so the prompt is encoded without adding another.
    EXPECT_EQ(tokenizer.encode(text, false), ids_of(entry["ids"]));
  }
}

TEST(TokenizerReference, ChatTemplateRefusesOtherTemplatesAndRoles) {
  TokenizerConfig config = deepseek_v3().config();
  const ChatTemplate chat = ChatTemplate::from_config(config);
  EXPECT_THROW(chat.render(std::vector<ChatMessage>{{"developer", "hi"}}, true), Error);
  config.chat_template += " ";
  EXPECT_THROW(ChatTemplate::from_config(config), Error);
  config.chat_template.clear();
  EXPECT_THROW(ChatTemplate::from_config(config), Error);
}

TEST(TokenizerReference, AddedTokensHonourLstripRstripAndPassOrder) {
  const auto& extra = fixture()["extra_added_tokens"];
  nlohmann::json file = nlohmann::json::parse(
      std::ifstream(std::filesystem::path(testing::kDeepSeekV3Dir) / "tokenizer.json"));
  for (const auto& token : extra["tokens"]) file["added_tokens"].push_back(token);
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  testing::write_file(dir / "tokenizer.json", file.dump());
  const Tokenizer tokenizer = Tokenizer::load(dir.string());
  for (const auto& entry : extra["cases"]) {
    SCOPED_TRACE(entry["text"].get<std::string>());
    EXPECT_EQ(tokenizer.encode(entry["text"].get<std::string>(), false), ids_of(entry["ids"]));
  }
}

double seconds_to_encode(const std::string& text, size_t* token_count) {
  const Tokenizer& tokenizer = deepseek_v3();  // loaded before the clock starts
  const auto start = std::chrono::steady_clock::now();
  *token_count = tokenizer.encode(text, false).size();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(TokenizerReference, Encodes100KilobytesWellUnderASecond) {
  std::string mixed;
  for (size_t i = 0; mixed.size() < 100'000; ++i) {
    const auto& corpus = fixture()["encode"];
    mixed += corpus[i % corpus.size()]["text"].get<std::string>();
  }
  size_t tokens = 0;
  const double seconds = seconds_to_encode(mixed, &tokens);
  std::printf("mixed corpus: %zu bytes -> %zu tokens in %.1f ms\n", mixed.size(), tokens,
              seconds * 1e3);
  EXPECT_LT(seconds, 1.0);

  // One enormous piece each: the cases a quadratic merge loop or regex would choke on.
  std::string emoji;
  while (emoji.size() < 100'000) emoji += "\xF0\x9F\x98\x80";  // U+1F600
  std::string cjk;
  while (cjk.size() < 100'000) cjk += "\xE4\xB8\xAD\xE6\x96\x87";  // 中文
  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{{"letters", std::string(100'000, 'a')},
                                                        {"spaces", std::string(100'000, ' ')},
                                                        {"newlines", std::string(100'000, '\n')},
                                                        {"digits", std::string(100'000, '7')},
                                                        {"punctuation", std::string(100'000, '!')},
                                                        {"emoji", emoji},
                                                        {"cjk", cjk}}) {
    const double run_seconds = seconds_to_encode(text, &tokens);
    std::printf("%s: %zu bytes -> %zu tokens in %.1f ms\n", name.c_str(), text.size(), tokens,
                run_seconds * 1e3);
    EXPECT_LT(run_seconds, 1.0) << name;
    EXPECT_EQ(deepseek_v3().decode(deepseek_v3().encode(text, false)), text) << name;
  }
}

TEST(TokenizerReference, RejectsInvalidUtf8Text) {
  try {
    deepseek_v3().encode("ok\xFFno", false);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("offset 2"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace mla::tokenizer
