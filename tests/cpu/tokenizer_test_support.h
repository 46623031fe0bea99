// Shared by the tokenizer tests: the DeepSeek-V3 tokenizer (unpacked into the build tree from
// tests/data/tokenizer/deepseek-v3.tar.xz), the reference fixture, and a tiny synthetic
// tokenizer.json for error cases. The big tokenizer loads once per test process.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace mla::tokenizer::testing {

inline const std::string kDeepSeekV3Dir = MLA_TEST_TOKENIZER_DIR;

inline const Tokenizer& deepseek_v3() {
  static const Tokenizer tokenizer = Tokenizer::load(kDeepSeekV3Dir);
  return tokenizer;
}

inline const nlohmann::json& fixture() {
  static const nlohmann::json parsed = [] {
    std::ifstream file(MLA_TEST_TOKENIZER_FIXTURE);
    return nlohmann::json::parse(file);
  }();
  return parsed;
}

inline std::vector<int32_t> ids_of(const nlohmann::json& array) {
  return array.get<std::vector<int32_t>>();
}

// A fresh directory under the system's temporary folder, named after the running test and the
// process, removed with everything in it when the object goes.
class ScratchDir {
 public:
  ScratchDir() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("mla-tokenizer-") + test->test_suite_name() + "-" + test->name() + "-" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& contents) {
  std::ofstream file(path, std::ios::binary);
  file << contents;
}

// A valid byte-level BPE tokenizer.json: the 256 byte tokens (ids 0..255), the merges given
// (their results take the next ids), and one special token.
inline nlohmann::json tiny_tokenizer_json(
    const std::vector<std::pair<std::string, std::string>>& merges = {{"a", "b"}, {"ab", "c"}}) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte)
    vocab[bytes_to_byte_level(std::string(1, static_cast<char>(byte)))] = byte;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [left, right] : merges) {
    if (!vocab.contains(left + right)) vocab[left + right] = static_cast<int>(vocab.size());
    merge_list.push_back(left + " " + right);
  }
  const int special_id = static_cast<int>(vocab.size());
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", special_id},
         {"content", "<s>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", "\\s+|[^\\s]+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

}  // namespace mla::tokenizer::testing
