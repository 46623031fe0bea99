// `mla tokenize`: a model's tokenizer from the command line. Text (--text or --file) becomes ids,
// printed comma-separated so they can be fed back to --decode; --decode turns ids into text;
// --json prints both as JSON (with the tokens as tokenizer.json spells them).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tools/mla/commands.h"

namespace mla::tools {
namespace {

struct TokenizeOptions {
  std::string path;
  std::string text;
  std::string text_file;
  std::vector<int32_t> decode_ids;
  bool json = false;
  bool no_bos = false;
  bool skip_special = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw_error("--file: cannot open '{}'", path);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

void run_decode(const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options) {
  for (int32_t id : options.decode_ids)
    if (!tokenizer.contains(id))
      throw_error("--decode: {} is not a token id of {} (ids run from 0 to {})", id,
                  tokenizer.path(), tokenizer.vocab_size() - 1);
  const std::string text = tokenizer.decode(options.decode_ids, options.skip_special);
  if (options.json)
    fmt::print("{}\n", nlohmann::json{{"ids", options.decode_ids}, {"text", text}}.dump());
  else
    fmt::print("{}\n", text);
}

void run_encode(const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options) {
  const std::string text =
      options.text_file.empty() ? options.text : read_text_file(options.text_file);
  const bool add_bos = tokenizer.config().add_bos_token && !options.no_bos;
  const std::vector<int32_t> ids = tokenizer.encode(text, add_bos);
  if (options.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : ids) tokens.push_back(tokenizer.id_to_token(id));
    fmt::print("{}\n", nlohmann::json{{"ids", ids}, {"tokens", tokens}}.dump());
  } else {
    fmt::print("{}\n", fmt::join(ids, ","));
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command = app.add_subcommand(
      "tokenize", "Encode text to token ids, or decode ids to text, with a model's tokenizer");
  command
      ->add_option("path", options->path,
                   "Model directory holding tokenizer.json (and tokenizer_config.json), or the "
                   "tokenizer.json file")
      ->required();
  CLI::Option* text = command->add_option("--text", options->text, "Text to encode");
  CLI::Option* file = command->add_option("--file", options->text_file, "Encode this file's text");
  CLI::Option* decode =
      command->add_option("--decode", options->decode_ids, "Ids to decode, e.g. 0,19923,2058")
          ->delimiter(',');
  text->excludes(file, decode);
  file->excludes(decode);
  command->add_flag("--json", options->json, "Print JSON: ids and tokens, or ids and text");
  command->add_flag("--no-bos", options->no_bos,
                    "Do not add BOS (added by default when tokenizer_config.json's add_bos_token "
                    "is true)");
  command->add_flag("--skip-special", options->skip_special,
                    "With --decode, leave special tokens out of the text");
  command->callback([options, text, file, decode] {
    if (text->count() + file->count() + decode->count() == 0)
      throw_error("tokenize: give --text, --file or --decode");
    const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::load(options->path);
    if (decode->count() > 0)
      run_decode(tokenizer, *options);
    else
      run_encode(tokenizer, *options);
  });
}

}  // namespace mla::tools
