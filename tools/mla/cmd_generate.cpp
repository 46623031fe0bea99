// `mla generate MODEL_DIR --prompt-ids 1,2,3` (or --prompt TEXT): greedy (or sampled) generation
// on the CPU backend, or with --backend cuda on the GPU (--model-preset NAME --load-format dummy
// instead of MODEL_DIR: random weights of a released model's shapes). Prints the generated ids on
// one line, then their text when the model directory has a tokenizer.json (with --json, one JSON
// object with `ids` and `text`); timings go to stderr. --prefill-chunk N and --token-by-token
// choose how the prompt enters the model (chunked prefill over cached context; one token per step
// through the absorbed decode path): all ways give the same tokens.
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
#include "model/generate.h"
#include "model/model.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tools/mla/commands.h"
#include "tools/mla/model_setup.h"

namespace mla::tools {
namespace {

struct GenerateCommandOptions {
  ModelSourceOptions source;
  std::string prompt_ids;
  std::string prompt_text;
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
  const ModelSource source = resolve_model_source(options.source);
  const std::string& model_dir = source.model_dir;
  // The model directory's tokenizer, when it has one: --prompt needs it, and output gets text.
  std::optional<tokenizer::Tokenizer> text_tokenizer;
  if (!model_dir.empty() &&
      std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    text_tokenizer = tokenizer::Tokenizer::load(model_dir);
  if (options.prompt_ids.empty() == options.prompt_text.empty())
    throw_error("give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
  if (!options.prompt_text.empty() && !text_tokenizer)
    throw_error("--prompt needs {}/tokenizer.json, which does not exist (use --prompt-ids)",
                model_dir.empty() ? "MODEL_DIR" : model_dir);
  const std::vector<int32_t> prompt = options.prompt_text.empty()
                                          ? parse_ids(options.prompt_ids)
                                          : text_tokenizer->encode(options.prompt_text);
  const auto load_start = std::chrono::steady_clock::now();
  LoadedModel loaded = load_model(source, options.source, {}, "mla generate");
  model::Model* model = loaded.model.get();
  const model::Backend& backend = *loaded.backend;
  if (loaded.cuda != nullptr) {
    // One sequence: the arena sized for its largest step; the sequence's cache is its own.
    MemoryPlanRequest request;
    request.max_num_seqs = 1;
    const int prompt_size = std::max(1, static_cast<int>(prompt.size()));
    request.max_num_batched_tokens = options.generate.token_by_token ? 1
                                     : options.generate.prefill_chunk > 0
                                         ? std::min(options.generate.prefill_chunk, prompt_size)
                                         : prompt_size;
    request.max_model_len = std::max(2, prompt_size + options.generate.max_tokens);
    plan_memory(loaded, options.source, request, "mla generate");
  }
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
  add_model_source_options(command, options->source);
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
