// `mla serve MODEL_DIR`: the OpenAI-compatible server on 127.0.0.1:8000 (by default), on the CPU
// backend or (--backend cuda) the GPU, where the KV cache gets what the memory plan leaves of
// --gpu-memory-utilization. --model-preset NAME --load-format dummy serves random weights of a
// released model's shapes (token-id prompts only). Prints the
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
#include "model/model.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/mla/commands.h"
#include "tools/mla/model_setup.h"

namespace mla::tools {
namespace {

struct ServeCommandOptions {
  ModelSourceOptions source;
  std::string tokenizer;  // default: MODEL_DIR when it has tokenizer.json
  std::string served_model_name;
  server::ServerOptions server;
  int kv_cache_tokens = 32768;  // the CPU backend's cache (the CUDA backend's: the memory plan)
  int max_model_len = 0;        // 0: min(max_position_embeddings, what the cache holds)
  engine::SchedulerOptions scheduler;
  int max_queued_requests = 256;
  bool no_prefix_caching = false;
  bool check_invariants = false;
  bool kv_cache_tokens_given = false;
};

// The CUDA backend's default longest sequence (the arena is sized for it; see run_serve).
constexpr int kCudaDefaultMaxModelLen = 8192;

void run_serve(ServeCommandOptions options) {
  const ModelSource source = resolve_model_source(options.source);
  const bool cuda = options.source.backend == "cuda";
  if (options.kv_cache_tokens < 128)
    throw_error("--kv-cache-tokens must be at least 128, got {}", options.kv_cache_tokens);
  namespace fs = std::filesystem;
  const weights::ModelConfig& config = source.config;
  if (options.max_model_len > config.max_position_embeddings)
    throw_error("--max-model-len {} is more than the model's max_position_embeddings {}",
                options.max_model_len, config.max_position_embeddings);
  if (options.served_model_name.empty()) options.served_model_name = source.name;
  if (options.tokenizer.empty() && !source.model_dir.empty() &&
      fs::exists(fs::path(source.model_dir) / "tokenizer.json"))
    options.tokenizer = source.model_dir;

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

  LoadedModel loaded = load_model(source, options.source, {}, "mla serve");
  const auto& model = loaded.model;
  const model::Backend& backend = *loaded.backend;
  int num_pages = (options.kv_cache_tokens + 63) / 64;
  if (cuda) {
    // The activations' arena is sized for the longest sequence the server takes, so the default
    // is a modest one rather than the model's whole context (--max-model-len raises it).
    MemoryPlanRequest request;
    request.max_num_batched_tokens = options.scheduler.max_num_batched_tokens;
    request.max_num_seqs = options.scheduler.max_num_seqs;
    request.max_model_len = options.max_model_len > 0
                                ? options.max_model_len
                                : std::min(config.max_position_embeddings, kCudaDefaultMaxModelLen);
    const int planned = plan_memory(loaded, options.source, request, "mla serve").num_pages;
    num_pages = options.kv_cache_tokens_given ? std::min(planned, num_pages) : planned;
  }
  const int cache_limit = (num_pages - 1) * 64;  // one page kept for copy-on-write
  int max_model_len = std::min(config.max_position_embeddings, cache_limit);
  if (cuda) max_model_len = std::min(max_model_len, kCudaDefaultMaxModelLen);
  if (options.max_model_len > 0) {
    if (options.max_model_len > cache_limit)
      throw_error("--max-model-len {} does not fit the cache ({} tokens usable of {}): raise {}",
                  options.max_model_len, cache_limit, num_pages * 64,
                  cuda ? "--gpu-memory-utilization" : "--kv-cache-tokens");
    max_model_len = options.max_model_len;
  }
  engine::ModelCacheRunner runner(*model, num_pages);
  if (cuda) record_step_graphs(runner, *model, options.scheduler.max_num_seqs, "mla serve");
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
      options.served_model_name.c_str(),
      source.model_dir.empty() ? ("preset " + source.name + ", dummy weights").c_str()
                               : source.model_dir.c_str(),
      config.num_hidden_layers, config.vocab_size, backend.name().c_str(),
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
  add_model_source_options(command, options->source);
  command->add_option("--host", options->server.host, "Address to listen on")
      ->capture_default_str();
  command->add_option("--port", options->server.port, "Port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
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
                   "Latent-cache capacity in tokens (64-token pages); cuda: at most this (default: "
                   "what the memory plan leaves)")
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
  command->callback([options, command] {
    options->kv_cache_tokens_given = command->count("--kv-cache-tokens") > 0;
    run_serve(*options);
  });
}

}  // namespace mla::tools
