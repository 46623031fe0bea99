// Tokenizer::load: reads tokenizer.json and tokenizer_config.json, checks every field that changes
// what the ids are, and builds the pieces (added tokens, pre-tokenizer, BPE, decode tables).
//
// The subtle thing: anything this file does not implement is refused with the file, the field and
// what is supported, never ignored, since a tokenizer that silently differs from the reference
// produces wrong ids that look fine. Fields that change only offsets (trim_offsets, the ByteLevel
// post-processor) or that cannot matter here (fuse_unk without an unk_token) are accepted.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace mla::tokenizer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Ids beyond this are certainly a corrupt file (real vocabularies are ~10^5).
constexpr int64_t kMaxTokenId = 1 << 24;

std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// A JSON value, the file it came from and its path inside ("model.vocab"), so that every error
// can say where: "/m/tokenizer.json: model.type is ...".
class Field {
 public:
  Field(const json& value, std::string file, std::string path = "")
      : value_(value), file_(std::move(file)), path_(std::move(path)) {}

  const json& value() const { return value_; }
  std::string where() const { return path_.empty() ? file_ : file_ + ": " + path_; }
  bool is_null() const { return value_.is_null(); }

  // A key that must be there.
  Field operator[](const char* key) const {
    require_object();
    if (!value_.contains(key)) throw_error("{} is missing", child_where(key));
    return Field(value_[key], file_, child_path(key));
  }
  // A key that may be absent; absent and null both give null.
  Field optional(const char* key) const {
    static const json null_value;
    require_object();
    const auto found = value_.find(key);
    return Field(found == value_.end() ? null_value : *found, file_, child_path(key));
  }
  Field at(size_t index) const {
    return Field(value_[index], file_, fmt::format("{}[{}]", path_, index));
  }

  std::string string() const {
    if (!value_.is_string())
      throw_error("{} must be a string, found {}", where(), describe(value_));
    return value_.get<std::string>();
  }
  bool boolean() const {
    if (!value_.is_boolean())
      throw_error("{} must be true or false, found {}", where(), describe(value_));
    return value_.get<bool>();
  }
  bool boolean_or(bool fallback) const { return is_null() ? fallback : boolean(); }
  int64_t integer() const {
    if (!value_.is_number_integer())
      throw_error("{} must be an integer, found {}", where(), describe(value_));
    return value_.get<int64_t>();
  }
  size_t array_size() const {
    if (!value_.is_array()) throw_error("{} must be an array, found {}", where(), describe(value_));
    return value_.size();
  }

  [[noreturn]] void unsupported(std::string_view supported) const {
    throw_error("{} is {}, which mla.cpp does not support: it supports {}", where(),
                describe(value_), supported);
  }
  void require_null(std::string_view supported) const {
    if (!is_null()) unsupported(supported);
  }
  void require_false(std::string_view supported) const {
    if (boolean_or(false)) unsupported(supported);
  }

 private:
  std::string child_path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  std::string child_where(const char* key) const { return file_ + ": " + child_path(key); }
  void require_object() const {
    if (!value_.is_object())
      throw_error("{} must be a JSON object, found {}", where(), describe(value_));
  }

  const json& value_;
  std::string file_;
  std::string path_;
};

std::string read_file(const fs::path& path, std::string_view what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw_error("cannot open {} '{}': {}", what, path.string(), std::strerror(errno));
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

json parse_json_file(const fs::path& path, std::string_view what) {
  const std::string text = read_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::parse_error& error) {
    throw_error("{} '{}' is not valid JSON: {}", what, path.string(), error.what());
  }
}

// The text of a special-token entry in tokenizer_config.json: "..." or {"content": "...", ...}.
std::string token_text(const Field& field) {
  if (field.is_null()) return "";
  if (field.value().is_object()) return field["content"].string();
  return field.string();
}

TokenizerConfig load_config(const fs::path& path) {
  TokenizerConfig config;
  if (!fs::exists(path)) return config;
  const json root = parse_json_file(path, "tokenizer config");
  const Field file(root, path.string());
  config.path = path.string();
  config.add_bos_token = file.optional("add_bos_token").boolean_or(false);
  file.optional("add_eos_token").require_false("add_eos_token: false (no EOS appended)");
  file.optional("clean_up_tokenization_spaces")
      .require_false("clean_up_tokenization_spaces: false (decoding as the tokenizer.json says)");
  config.bos_token = token_text(file.optional("bos_token"));
  config.eos_token = token_text(file.optional("eos_token"));
  const Field chat_template = file.optional("chat_template");
  if (!chat_template.is_null()) {
    if (!chat_template.value().is_string())
      chat_template.unsupported("a single template string (not a list of named templates)");
    config.chat_template = chat_template.string();
  }
  return config;
}

}  // namespace

// Builds a Tokenizer; a friend of it, so that the fields can stay private.
class TokenizerLoader {
 public:
  static Tokenizer load(const std::string& path);

 private:
  static void check_pipeline(const Field& file);
  static void load_pre_tokenizer(const Field& field, PreTokenizer& pre_tokenizer);
  static std::unordered_map<std::string, int32_t> read_vocab(const Field& vocab);
  static std::vector<AddedToken> read_added_tokens(const Field& added_tokens);
  static void add_merges(const Field& merges,
                         const std::unordered_map<std::string, int32_t>& model_vocab,
                         BpeModel& bpe);
};

void TokenizerLoader::check_pipeline(const Field& file) {
  file.optional("truncation").require_null("truncation: null (mla.cpp never truncates)");
  file.optional("padding").require_null("padding: null (mla.cpp never pads)");

  const Field normalizer = file.optional("normalizer");
  const bool identity_normalizer =
      normalizer.is_null() ||
      (normalizer["type"].string() == "Sequence" && normalizer["normalizers"].array_size() == 0);
  if (!identity_normalizer) normalizer.unsupported("no normalizer (null or an empty Sequence)");

  const Field post_processor = file.optional("post_processor");
  if (!post_processor.is_null() && post_processor["type"].string() != "ByteLevel")
    post_processor.unsupported("null or ByteLevel (which only trims offsets)");

  const Field decoder = file["decoder"];
  if (decoder.is_null() || decoder["type"].string() != "ByteLevel")
    decoder.unsupported("the ByteLevel decoder");

  const Field model = file["model"];
  if (model["type"].string() != "BPE") model["type"].unsupported("\"BPE\" (byte-level BPE)");
  model.optional("dropout").require_null("dropout: null");
  model.optional("unk_token").require_null("unk_token: null (every byte has a token)");
  model.optional("byte_fallback").require_false("byte_fallback: false");
  model.optional("ignore_merges").require_false("ignore_merges: false (always merge)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Field field = model.optional(affix);
    if (!field.is_null() && !field.string().empty()) field.unsupported("null or \"\"");
  }
}

void TokenizerLoader::load_pre_tokenizer(const Field& field, PreTokenizer& pre_tokenizer) {
  std::vector<Field> steps;
  if (field["type"].string() == "Sequence") {
    const Field list = field["pretokenizers"];
    for (size_t i = 0; i < list.array_size(); ++i) steps.push_back(list.at(i));
  } else {
    steps.push_back(field);
  }
  bool byte_level_seen = false;
  for (const Field& step : steps) {
    const std::string type = step["type"].string();
    if (byte_level_seen)
      step.unsupported("Split steps followed by one ByteLevel step, which comes last");
    if (type == "Split") {
      const Field pattern = step["pattern"];
      if (!pattern.value().is_object() || !pattern.value().contains("Regex"))
        pattern.unsupported("{\"Regex\": ...} patterns");
      if (step["behavior"].string() != "Isolated")
        step["behavior"].unsupported("the \"Isolated\" behavior");
      step.optional("invert").require_false("invert: false");
      pre_tokenizer.add_split(SplitRegex(pattern["Regex"].string(), pattern["Regex"].where()));
    } else if (type == "ByteLevel") {
      // Both default to true in the reference, so they must be written out as false.
      if (step.optional("add_prefix_space").boolean_or(true))
        step.optional("add_prefix_space").unsupported("add_prefix_space: false");
      if (step.optional("use_regex").boolean_or(true))
        step.optional("use_regex").unsupported("use_regex: false (the regexes are Split steps)");
      byte_level_seen = true;
    } else {
      step["type"].unsupported("Split (Regex, Isolated) and ByteLevel pre-tokenizers");
    }
  }
  if (!byte_level_seen) field.unsupported("pre-tokenizers that end with ByteLevel");
}

std::unordered_map<std::string, int32_t> TokenizerLoader::read_vocab(const Field& vocab) {
  if (!vocab.value().is_object())
    throw_error("{} must be an object of token: id, found {}", vocab.where(),
                describe(vocab.value()));
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab.value().size());
  for (const auto& [token, id_value] : vocab.value().items()) {
    if (!id_value.is_number_integer())
      throw_error("{}[\"{}\"] must be an integer id, found {}", vocab.where(), token,
                  describe(id_value));
    const int64_t id = id_value.get<int64_t>();
    if (id < 0 || id >= kMaxTokenId)
      throw_error("{}[\"{}\"]: id {} is outside 0..{}", vocab.where(), token, id, kMaxTokenId - 1);
    ids.emplace(token, static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<AddedToken> TokenizerLoader::read_added_tokens(const Field& added_tokens) {
  std::vector<AddedToken> tokens;
  if (added_tokens.is_null()) return tokens;
  for (size_t i = 0; i < added_tokens.array_size(); ++i) {
    const Field entry = added_tokens.at(i);
    AddedToken token;
    const int64_t id = entry["id"].integer();
    if (id < 0 || id >= kMaxTokenId)
      throw_error("{}.id: {} is outside 0..{}", entry.where(), id, kMaxTokenId - 1);
    token.id = static_cast<int32_t>(id);
    token.content = entry["content"].string();
    if (token.content.empty()) throw_error("{}.content is empty", entry.where());
    token.special = entry.optional("special").boolean_or(false);
    token.lstrip = entry.optional("lstrip").boolean_or(false);
    token.rstrip = entry.optional("rstrip").boolean_or(false);
    token.normalized = entry.optional("normalized").boolean_or(!token.special);
    entry.optional("single_word").require_false("single_word: false");
    tokens.push_back(std::move(token));
  }
  return tokens;
}

void TokenizerLoader::add_merges(const Field& merges,
                                 const std::unordered_map<std::string, int32_t>& model_vocab,
                                 BpeModel& bpe) {
  auto id_of = [&](const std::string& token, const Field& where) {
    const auto found = model_vocab.find(token);
    if (found == model_vocab.end())
      throw_error("{}: \"{}\" is not in model.vocab", where.where(), token);
    return found->second;
  };
  const size_t count = merges.array_size();
  for (size_t rank = 0; rank < count; ++rank) {
    const Field merge = merges.at(rank);
    std::string left, right;
    if (merge.value().is_string()) {
      // The older spelling "left right": vocabulary tokens never contain a space (it is 'Ġ').
      const std::string text = merge.string();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw_error("{}: \"{}\" is not two tokens separated by one space", merge.where(), text);
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      if (merge.array_size() != 2)
        throw_error("{} must be a pair [left, right], found {}", merge.where(),
                    describe(merge.value()));
      left = merge.at(0).string();
      right = merge.at(1).string();
    }
    bpe.add_merge(id_of(left, merge), id_of(right, merge), id_of(left + right, merge),
                  static_cast<int32_t>(rank));
  }
}

Tokenizer TokenizerLoader::load(const std::string& path) {
  const fs::path given(path);
  fs::path json_path = given;
  if (fs::is_directory(given)) {
    json_path = given / "tokenizer.json";
    if (!fs::exists(json_path))
      throw_error(
          "no tokenizer.json in the directory '{}' (pass a model directory holding "
          "tokenizer.json, or the tokenizer.json file itself)",
          path);
  } else if (!fs::exists(given)) {
    throw_error(
        "'{}' does not exist (pass a model directory holding tokenizer.json, or the "
        "tokenizer.json file itself)",
        path);
  }
  const json root = parse_json_file(json_path, "tokenizer file");
  const Field file(root, json_path.string());
  if (!root.is_object())
    throw_error("{} is not a tokenizer.json: it holds {}", json_path.string(), describe(root));
  check_pipeline(file);

  const Field model = file["model"];
  const std::unordered_map<std::string, int32_t> model_vocab = read_vocab(model["vocab"]);
  std::array<int32_t, 256> byte_token_ids{};
  for (int byte = 0; byte < 256; ++byte) {
    const std::string spelling = bytes_to_byte_level(std::string(1, static_cast<char>(byte)));
    const auto found = model_vocab.find(spelling);
    if (found == model_vocab.end())
      throw_error("{} has no token for the byte 0x{:02x} (\"{}\"); byte-level BPE needs all 256",
                  model["vocab"].where(), byte, spelling);
    byte_token_ids[byte] = found->second;
  }
  BpeModel bpe(byte_token_ids);
  add_merges(model["merges"], model_vocab, bpe);

  Tokenizer tokenizer(std::move(bpe));
  tokenizer.path_ = json_path.string();
  load_pre_tokenizer(file["pre_tokenizer"], tokenizer.pre_tokenizer_);
  const std::vector<AddedToken> added_tokens = read_added_tokens(file.optional("added_tokens"));

  int32_t size = 0;
  for (const auto& [token, id] : model_vocab) size = std::max(size, id + 1);
  for (const AddedToken& token : added_tokens) size = std::max(size, token.id + 1);
  tokenizer.tokens_.resize(size);
  tokenizer.token_bytes_.resize(size);
  tokenizer.known_.assign(size, 0);
  tokenizer.special_.assign(size, 0);
  auto define = [&](int32_t id, const std::string& spelling, bool special) {
    tokenizer.tokens_[id] = spelling;
    tokenizer.token_bytes_[id] = byte_level_to_bytes(spelling).value_or(spelling);
    tokenizer.known_[id] = 1;
    tokenizer.special_[id] = special;
    tokenizer.ids_by_token_.insert_or_assign(spelling, id);
  };
  for (const auto& [token, id] : model_vocab) {
    if (tokenizer.known_[id])
      throw_error("{}: the id {} is given to both \"{}\" and \"{}\"", model["vocab"].where(), id,
                  tokenizer.tokens_[id], token);
    define(id, token, false);
  }
  // Added tokens come second: where one shares an id with the model vocabulary, it wins, as in
  // the reference.
  for (const AddedToken& token : added_tokens) {
    define(token.id, token.content, token.special);
    tokenizer.added_tokens_.add(token);
  }

  tokenizer.config_ = load_config(json_path.parent_path() / "tokenizer_config.json");
  const TokenizerConfig& config = tokenizer.config_;
  auto id_of_config_token = [&](const std::string& text, const char* key) -> int32_t {
    if (text.empty()) return -1;
    const std::optional<int32_t> id = tokenizer.token_to_id(text);
    if (!id)
      throw_error("{}: {} \"{}\" is not a token of {}", config.path, key, text, tokenizer.path_);
    return *id;
  };
  tokenizer.bos_id_ = id_of_config_token(config.bos_token, "bos_token");
  tokenizer.eos_id_ = id_of_config_token(config.eos_token, "eos_token");
  if (config.add_bos_token && tokenizer.bos_id_ < 0)
    throw_error("{}: add_bos_token is true but bos_token is not set", config.path);
  return tokenizer;
}

Tokenizer Tokenizer::load(const std::string& path) {
  return TokenizerLoader::load(path);
}

}  // namespace mla::tokenizer
