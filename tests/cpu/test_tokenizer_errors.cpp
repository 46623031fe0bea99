// Loading errors a person can act on: each names the file and the field and says what is
// supported, for a missing file, malformed JSON, and every unsupported setting that would change
// the ids. Uses a tiny synthetic tokenizer.json (tokenizer_test_support.h) with one field broken.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "tests/cpu/tokenizer_test_support.h"

namespace mla::tokenizer {
namespace {

using nlohmann::json;

// Loads `path` and returns the error message ("" if it loaded).
std::string load_error(const std::string& path) {
  try {
    Tokenizer::load(path);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Writes the tiny tokenizer after `edit`, and returns the error of loading it.
std::string error_after(const std::function<void(json&)>& edit) {
  json file = testing::tiny_tokenizer_json();
  edit(file);
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  testing::write_file(dir / "tokenizer.json", file.dump());
  return load_error((dir / "tokenizer.json").string());
}

#define EXPECT_MESSAGE_HAS(message, part) \
  EXPECT_NE(std::string(message).find(part), std::string::npos) << "message: " << (message)

TEST(TokenizerErrors, TinyTokenizerLoadsAndRoundTrips) {
  EXPECT_EQ(error_after([](json&) {}), "");
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  testing::write_file(dir / "tokenizer.json", testing::tiny_tokenizer_json().dump());
  const Tokenizer tokenizer = Tokenizer::load(dir.string());
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("abc <s> x", false)), "abc <s> x");
  EXPECT_EQ(tokenizer.bos_id(), -1);
  try {
    tokenizer.encode("x", true);
    ADD_FAILURE() << "no error for add_bos without a BOS token";
  } catch (const Error& error) {
    EXPECT_MESSAGE_HAS(error.what(), "no bos_token");
  }
}

TEST(TokenizerErrors, MissingFileOrDirectory) {
  EXPECT_MESSAGE_HAS(load_error("/nonexistent/model"), "'/nonexistent/model' does not exist");
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  EXPECT_MESSAGE_HAS(load_error(dir.string()), "no tokenizer.json in the directory");
}

TEST(TokenizerErrors, MalformedJson) {
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  testing::write_file(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
  const std::string message = load_error(dir.string());
  EXPECT_MESSAGE_HAS(message, "tokenizer.json' is not valid JSON");
  EXPECT_MESSAGE_HAS(message, dir.string());

  testing::write_file(dir / "tokenizer.json", testing::tiny_tokenizer_json().dump());
  testing::write_file(dir / "tokenizer_config.json", "{\"add_bos_token\": tru}");
  EXPECT_MESSAGE_HAS(load_error(dir.string()), "tokenizer_config.json' is not valid JSON");
}

TEST(TokenizerErrors, UnsupportedModelType) {
  const std::string message = error_after([](json& file) { file["model"]["type"] = "WordPiece"; });
  EXPECT_MESSAGE_HAS(message, "tokenizer.json: model.type is \"WordPiece\"");
  EXPECT_MESSAGE_HAS(message, "supports \"BPE\"");
}

TEST(TokenizerErrors, UnsupportedSettingsNameTheirField) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"normalizer",
       [](json& f) {
         f["normalizer"] = {{"type", "NFC"}};
       }},
      {"post_processor",
       [](json& f) {
         f["post_processor"] = {{"type", "TemplateProcessing"}};
       }},
      {"decoder",
       [](json& f) {
         f["decoder"] = {{"type", "Metaspace"}};
       }},
      {"truncation",
       [](json& f) {
         f["truncation"] = {{"max_length", 8}};
       }},
      {"model.byte_fallback", [](json& f) { f["model"]["byte_fallback"] = true; }},
      {"model.ignore_merges", [](json& f) { f["model"]["ignore_merges"] = true; }},
      {"model.dropout", [](json& f) { f["model"]["dropout"] = 0.1; }},
      {"model.unk_token", [](json& f) { f["model"]["unk_token"] = "<unk>"; }},
      {"model.continuing_subword_prefix",
       [](json& f) { f["model"]["continuing_subword_prefix"] = "##"; }},
      {"pre_tokenizer.pretokenizers[0].behavior",
       [](json& f) { f["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }},
      {"pre_tokenizer.pretokenizers[0].invert",
       [](json& f) { f["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; }},
      {"pre_tokenizer.pretokenizers[0].pattern",
       [](json& f) {
         f["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
       }},
      {"pre_tokenizer.pretokenizers[0].pattern.Regex",
       [](json& f) { f["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }},
      {"pre_tokenizer.pretokenizers[1].use_regex",
       [](json& f) { f["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; }},
      {"pre_tokenizer.pretokenizers[1].add_prefix_space",
       [](json& f) { f["pre_tokenizer"]["pretokenizers"][1].erase("add_prefix_space"); }},
      {"pre_tokenizer.pretokenizers[0].type",
       [](json& f) {
         f["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}};
       }},
      {"pre_tokenizer", [](json& f) { f["pre_tokenizer"]["pretokenizers"].erase(1); }},
      {"added_tokens[0].single_word", [](json& f) { f["added_tokens"][0]["single_word"] = true; }},
      {"added_tokens[0].id", [](json& f) { f["added_tokens"][0]["id"] = "seven"; }},
      {"model.merges[0]: \"ab\" is not two tokens",
       [](json& f) { f["model"]["merges"][0] = "ab"; }},
      {"model.merges[1]: \"zq\" is not in model.vocab",
       [](json& f) { f["model"]["merges"][1] = "z q"; }},
      {"model.vocab has no token for the byte 0x41",
       [](json& f) { f["model"]["vocab"].erase("A"); }},
      {"model.vocab is missing", [](json& f) { f["model"].erase("vocab"); }},
  };
  for (const auto& [field, edit] : cases) {
    const std::string message = error_after(edit);
    EXPECT_MESSAGE_HAS(message, "tokenizer.json: " + field);
  }
}

TEST(TokenizerErrors, ConfigTokensMustExist) {
  const testing::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.path();
  testing::write_file(dir / "tokenizer.json", testing::tiny_tokenizer_json().dump());
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"add_bos_token": true, "bos_token": {"content": "<bos>"}})");
  EXPECT_MESSAGE_HAS(load_error(dir.string()), "bos_token \"<bos>\" is not a token of");
  testing::write_file(dir / "tokenizer_config.json", R"({"add_eos_token": true})");
  EXPECT_MESSAGE_HAS(load_error(dir.string()), "tokenizer_config.json: add_eos_token is true");
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": null})");
  const Tokenizer tokenizer = Tokenizer::load((dir / "tokenizer.json").string());
  EXPECT_EQ(tokenizer.encode("ab"),
            (std::vector<int32_t>{*tokenizer.token_to_id("<s>"), *tokenizer.token_to_id("ab")}));
  EXPECT_EQ(tokenizer.eos_id(), -1);
}

}  // namespace
}  // namespace mla::tokenizer
