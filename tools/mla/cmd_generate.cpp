// `mla generate MODEL_DIR --prompt-ids 1,2,3` (or --prompt TEXT): greedy (or sampled) generation
// on the CPU backend. Prints the generated ids on one line, then their text when the model
// directory has a tokenizer.json (with --json, one JSON object with `ids` and `text`); timings go
// to stderr. --prefill-chunk N and --token-by-token choose how the prompt enters the model
// (chunked prefill over cached context; one token per step through the absorbed decode path): all
// ways give the same tokens.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tools/mla/commands.h"

namespace mla::tools {
namespace {

struct GenerateCommandOptions {
  std::string model_dir;
  std::string prompt_ids;
  std::string prompt_text;
  std::string backend = "cpu";
  model::GenerateOptions generate;
  bool json = false;
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    int32_t value = 0;
    const auto [rest, status] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || status != std::errc() || rest != item.data() + item.size() || value < 0)
      throw_error(
          "--prompt-ids: '{}' is not a token id (expected comma-separated integers such "
          "as 1,2,3)",
          item);
    ids.push_back(value);
    begin = end + 1;
  }
  return ids;
}

void run_generate(const GenerateCommandOptions& options) {
  if (options.backend != "cpu")
    throw_error("--backend {}: only the cpu backend exists so far", options.backend);
  // The model directory's tokenizer, when it has one: --prompt needs it, and output gets text.
  std::optional<tokenizer::Tokenizer> text_tokenizer;
  if (std::filesystem::exists(std::filesystem::path(options.model_dir) / "tokenizer.json"))
    text_tokenizer = tokenizer::Tokenizer::load(options.model_dir);
  if (options.prompt_ids.empty() == options.prompt_text.empty())
    throw_error("give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
  if (!options.prompt_text.empty() && !text_tokenizer)
    throw_error("--prompt needs {}/tokenizer.json, which does not exist (use --prompt-ids)",
                options.model_dir);
  const std::vector<int32_t> prompt = options.prompt_text.empty()
                                          ? parse_ids(options.prompt_ids)
                                          : text_tokenizer->encode(options.prompt_text);
  const auto load_start = std::chrono::steady_clock::now();
  model::CpuBackend backend;
  const auto model = model::Model::load(options.model_dir, backend);
  const auto start = std::chrono::steady_clock::now();
  const bool stream = !options.json;
  bool first = true;
  const model::GenerateResult result =
      model::generate(*model, prompt, options.generate, [&](int32_t id) {
        if (!stream) return;
        fmt::print("{}{}", first ? "" : " ", id);
        std::fflush(stdout);
        first = false;
      });
  const auto end = std::chrono::steady_clock::now();
  const double load_s = std::chrono::duration<double>(start - load_start).count();
  const double run_s = std::chrono::duration<double>(end - start).count();
  std::optional<std::string> text;
  if (text_tokenizer) {
    tokenizer::StreamingDetokenizer detokenizer(*text_tokenizer, /*skip_special_tokens=*/true);
    text.emplace();
    for (int32_t id : result.ids) *text += detokenizer.push(id);
    *text += detokenizer.finish();
  }
  if (options.json) {
    nlohmann::json out = {
        {"prompt_ids", prompt},      {"ids", result.ids},      {"stop_reason", result.stop_reason},
        {"backend", backend.name()}, {"load_seconds", load_s}, {"generate_seconds", run_s}};
    if (text) out["text"] = *text;
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("\n");
    if (text) fmt::print("{}\n", *text);
  }
  std::fprintf(stderr, "mla: %zu prompt + %zu generated tokens in %.2f s (load %.2f s), %s\n",
               prompt.size(), result.ids.size(), run_s, load_s, result.stop_reason.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateCommandOptions>();
  CLI::App* command = app.add_subcommand("generate", "Generate tokens from prompt token ids");
  command->add_option("model_dir", options->model_dir, "Hugging Face model directory")->required();
  command->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, e.g. 1,2,3");
  command->add_option("--prompt", options->prompt_text,
                      "Prompt text (needs MODEL_DIR/tokenizer.json; BOS per its config)");
  command->add_option("--max-tokens", options->generate.max_tokens, "Tokens to generate")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  command->add_option("--temperature", options->generate.sampling.temperature, "0: greedy")
      ->capture_default_str();
  command->add_option("--top-p", options->generate.sampling.top_p, "Nucleus sampling mass")
      ->capture_default_str();
  command->add_option("--top-k", options->generate.sampling.top_k, "0: no limit")
      ->capture_default_str();
  command->add_option("--seed", options->generate.sampling.seed, "Sampling seed")
      ->capture_default_str();
  command->add_option("--backend", options->backend, "cpu (the only one so far)")
      ->capture_default_str();
  command
      ->add_option("--prefill-chunk", options->generate.prefill_chunk,
                   "Prompt tokens per step (chunked prefill); 0: all at once")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_flag("--token-by-token", options->generate.token_by_token,
                    "Feed the prompt one token per step (the absorbed decode path)");
  command->add_flag("--ignore-eos", options->generate.ignore_eos, "Do not stop at eos");
  command->add_flag("--json", options->json, "Print one JSON object: prompt_ids, ids, ...");
  command->callback([options] { run_generate(*options); });
}

}  // namespace mla::tools
