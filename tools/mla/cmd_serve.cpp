// `mla serve MODEL_DIR`: the OpenAI-compatible server on 127.0.0.1:8000 (by default). Prints the
// resolved configuration and a progress bar while the weights load, then one line
// "mla serve: listening on http://HOST:PORT" on stdout (with --port 0 the port the system chose),
// and serves until SIGINT or SIGTERM. The subtle thing: both signals are blocked in every thread
// and taken by one waiting thread, which stops the HTTP server cleanly; the engine then ends what
// is still running.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <pthread.h>

#include "core/error.h"
#include "engine/engine.h"
#include "model/cpu_backend.h"
#include "model/model.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/mla/commands.h"

namespace mla::tools {
namespace {

struct ServeCommandOptions {
  std::string model_dir;
  std::string backend = "cpu";
  std::string tokenizer;  // default: MODEL_DIR when it has tokenizer.json
  std::string served_model_name;
  server::ServerOptions server;
  int kv_cache_tokens = 32768;
  int max_model_len = 0;  // 0: min(max_position_embeddings, what the cache holds)
  engine::SchedulerOptions scheduler;
  int max_queued_requests = 256;
  bool no_prefix_caching = false;
  bool check_invariants = false;
};

void print_progress(int done, int total) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\rmla serve: loading weights [%s%s] %d/%d layers",
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done,
               total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

void run_serve(ServeCommandOptions options) {
  if (options.backend == "cuda")
    throw_error("--backend cuda: the CUDA backend is not part of this build yet (use cpu)");
  if (options.backend != "cpu")
    throw_error("--backend must be cpu or cuda, got '{}'", options.backend);
  if (options.kv_cache_tokens < 128)
    throw_error("--kv-cache-tokens must be at least 128, got {}", options.kv_cache_tokens);
  namespace fs = std::filesystem;
  if (!fs::is_directory(options.model_dir))
    throw_error("{} is not a directory (give a Hugging Face model directory)", options.model_dir);
  if (options.served_model_name.empty())
    options.served_model_name = fs::path(options.model_dir).lexically_normal().filename().string();
  if (options.served_model_name.empty() || options.served_model_name == ".")
    options.served_model_name =
        fs::absolute(options.model_dir).lexically_normal().parent_path().filename().string();
  if (options.tokenizer.empty() && fs::exists(fs::path(options.model_dir) / "tokenizer.json"))
    options.tokenizer = options.model_dir;

  // Signals go to one thread, set up before any other thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal

  std::optional<tokenizer::Tokenizer> text_tokenizer;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::string chat_note = "none (no tokenizer)";
  if (!options.tokenizer.empty()) {
    text_tokenizer = tokenizer::Tokenizer::load(options.tokenizer);
    try {
      chat_template = tokenizer::ChatTemplate::from_config(text_tokenizer->config());
      chat_note = "DeepSeek-V3";
    } catch (const Error& error) {
      chat_note = fmt::format("none ({})", error.what());
    }
  }

  model::CpuBackend backend;
  std::fprintf(stderr, "mla serve: loading %s on the %s backend\n", options.model_dir.c_str(),
               backend.name().c_str());
  const auto model = model::Model::load(options.model_dir, backend, {}, print_progress);
  const weights::ModelConfig& config = model->config();
  const int num_pages = (options.kv_cache_tokens + 63) / 64;
  const int cache_limit = (num_pages - 1) * 64;  // one page kept for copy-on-write
  int max_model_len = std::min(config.max_position_embeddings, cache_limit);
  if (options.max_model_len > 0) {
    if (options.max_model_len > config.max_position_embeddings)
      throw_error("--max-model-len {} is more than the model's max_position_embeddings {}",
                  options.max_model_len, config.max_position_embeddings);
    if (options.max_model_len > cache_limit)
      throw_error(
          "--max-model-len {} does not fit the cache ({} tokens usable of --kv-cache-tokens "
          "{}): raise --kv-cache-tokens",
          options.max_model_len, cache_limit, options.kv_cache_tokens);
    max_model_len = options.max_model_len;
  }
  engine::ModelCacheRunner runner(*model, num_pages);
  engine::EngineOptions engine_options;
  engine_options.scheduler = options.scheduler;
  engine_options.scheduler.max_model_len = max_model_len;
  engine_options.scheduler.enable_prefix_caching = !options.no_prefix_caching;
  engine_options.max_queued_requests = options.max_queued_requests;
  engine_options.check_invariants = options.check_invariants;
  const tokenizer::Tokenizer* tokenizer_ptr = text_tokenizer ? &*text_tokenizer : nullptr;
  engine::Engine engine(runner, engine_options, tokenizer_ptr);

  server::ApiContext context;
  context.model_name = options.served_model_name;
  context.tokenizer = tokenizer_ptr;
  context.chat_template = chat_template ? &*chat_template : nullptr;
  context.vocab_size = config.vocab_size;
  context.max_model_len = max_model_len;
  context.max_n = std::min(engine_options.scheduler.max_num_seqs, 128);

  std::fprintf(
      stderr,
      "mla serve: config: model %s (%s, %d layers, vocab %d), backend %s, tokenizer %s, "
      "chat template %s\n"
      "mla serve: config: kv cache %d pages x 64 tokens, max_model_len %d, "
      "max_num_seqs %d, max_num_batched_tokens %d, prefix caching %s, queue limit %d\n"
      "mla serve: config: host %s, port %d, api key %s, http threads %d\n",
      options.served_model_name.c_str(), options.model_dir.c_str(), config.num_hidden_layers,
      config.vocab_size, backend.name().c_str(),
      options.tokenizer.empty() ? "none (token-id prompts only)" : options.tokenizer.c_str(),
      chat_note.c_str(), num_pages, max_model_len, engine_options.scheduler.max_num_seqs,
      engine_options.scheduler.max_num_batched_tokens, options.no_prefix_caching ? "off" : "on",
      options.max_queued_requests, options.server.host.c_str(), options.server.port,
      options.server.api_key.empty() ? "none" : "required", options.server.http_threads);

  server::HttpServer http(engine, context, options.server);
  const int port = http.bind();
  std::thread signal_waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    std::fprintf(stderr, "mla serve: %s, stopping\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
    http.stop();
  });
  std::printf("mla serve: listening on http://%s:%d\n", options.server.host.c_str(), port);
  std::fflush(stdout);
  http.serve();
  // A stop that did not come from a signal: release the waiter.
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeCommandOptions>();
  CLI::App* command =
      app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  command->add_option("model_dir", options->model_dir, "Hugging Face model directory")->required();
  command->add_option("--host", options->server.host, "Address to listen on")
      ->capture_default_str();
  command->add_option("--port", options->server.port, "Port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--backend", options->backend, "cpu or cuda")->capture_default_str();
  command
      ->add_option("--api-key", options->server.api_key,
                   "Require 'Authorization: Bearer KEY' on every route but /health")
      ->envname("MLA_API_KEY");
  command->add_option("--served-model-name", options->served_model_name,
                      "The model's name in the API (default: the directory's name)");
  command->add_option("--tokenizer", options->tokenizer,
                      "Directory with tokenizer.json (default: MODEL_DIR when it has one)");
  command
      ->add_option("--kv-cache-tokens", options->kv_cache_tokens,
                   "Latent-cache capacity in tokens (64-token pages)")
      ->capture_default_str();
  command
      ->add_option("--max-model-len", options->max_model_len,
                   "Prompt + generated tokens per sequence (0: as much as model and cache allow)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command
      ->add_option("--max-num-seqs", options->scheduler.max_num_seqs,
                   "Sequences running at once (each choice of n counts)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command
      ->add_option("--max-num-batched-tokens", options->scheduler.max_num_batched_tokens,
                   "Token budget per step (decodes first, then prefill chunks)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command
      ->add_option("--max-queue", options->max_queued_requests,
                   "Requests waiting beyond which new ones get HTTP 429")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command
      ->add_option("--http-threads", options->server.http_threads,
                   "Connections served at once (each stream holds one)")
      ->check(CLI::Range(4, 4096))
      ->capture_default_str();
  command->add_flag("--no-prefix-caching", options->no_prefix_caching,
                    "Do not share identical prompt pages between requests");
  command->add_flag("--check-invariants", options->check_invariants,
                    "Check the scheduler's invariants after every step (slow; for testing)");
  command->callback([options] { run_serve(*options); });
}

}  // namespace mla::tools
