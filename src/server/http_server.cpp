// The HTTP routes over cpp-httplib; see http_server.h. A request's life here: parse (400 on
// anything wrong) → submit one engine request per prompt (400 if the engine refuses it, 429 when
// the queue is full) → wait for every choice (JSON) or pump the updates out as SSE chunks.
// A request that is not streamed is not cancelled when its client leaves (nothing is written
// until it is done); it ends at its max_tokens.
#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "server/metrics_text.h"

namespace mla::server {
namespace {

using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  send_json(res, error.status, error_body(error));
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    difference |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  return difference == 0;
}

// One HTTP request's engine requests and what came back so far.
struct Job {
  ParsedRequest request;
  std::string id;
  int64_t created = 0;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;  // one per prompt
  std::vector<ChoiceOutput> choices;                            // prompt-major
  std::vector<bool> started;                                    // a chunk of it was sent
  std::vector<int> text_offsets;
  bool finished_sent = false;

  int n() const { return request.options.n; }
  bool all_done() const {
    for (const auto& stream : streams)
      if (!stream->done()) return false;
    return true;
  }
  Usage usage() const {
    Usage usage;
    for (const auto& stream : streams) {
      usage.prompt_tokens += stream->prompt_tokens();
      usage.cached_tokens += stream->cached_prompt_tokens();
    }
    for (const ChoiceOutput& choice : choices)
      usage.completion_tokens += static_cast<int>(choice.tokens.size());
    return usage;
  }
  // Takes the updates that arrived (waiting up to `timeout` when there are none); each is
  // returned with its choice's index in the response.
  std::vector<std::pair<int, engine::ChoiceUpdate>> take(std::chrono::milliseconds timeout) {
    std::vector<std::pair<int, engine::ChoiceUpdate>> taken;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (size_t p = 0; p < streams.size(); ++p) {
        std::vector<engine::ChoiceUpdate> updates;
        // One prompt: block on its stream; several: poll them in turn.
        const auto wait = streams.size() == 1 ? timeout : std::chrono::milliseconds(0);
        streams[p]->wait(updates, wait);
        for (auto& update : updates)
          taken.emplace_back(static_cast<int>(p) * n() + update.index, std::move(update));
      }
      if (!taken.empty() || streams.size() == 1 || std::chrono::steady_clock::now() >= deadline)
        return taken;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
};

}  // namespace

struct HttpServer::Impl {
  Impl(engine::Engine& engine, const ApiContext& context, const ServerOptions& options)
      : engine(engine), context(context), options(options) {}

  void routes();
  void generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  bool pump(Job& job, httplib::DataSink& sink);

  engine::Engine& engine;
  ApiContext context;
  ServerOptions options;
  httplib::Server http;
  int listen_socket = -1;  // captured when httplib creates it, to raise its backlog
  std::atomic<uint64_t> next_id{1};
};

void HttpServer::Impl::routes() {
  const int threads = options.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(64u << 20);
  http.set_keep_alive_max_count(1000);
  http.set_tcp_nodelay(true);
  http.set_socket_options([this](int socket) {
    const int yes = 1;  // what httplib's default options do
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (listen_socket < 0) listen_socket = socket;
  });
  http.set_read_timeout(30, 0);
  http.set_write_timeout(10, 0);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (header.rfind(prefix, 0) == 0 && same_secret(header.substr(prefix.size()), options.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_json(res, 401,
              error_body("missing or wrong API key: send 'Authorization: Bearer <key>'",
                         "invalid_request_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return;
    const std::string message = res.status == 404
                                    ? fmt::format("no route {} {}", req.method, req.path)
                                : res.status == 413 ? std::string("the request body is too large")
                                                    : fmt::format("HTTP error {}", res.status);
    send_json(res, res.status,
              error_body(message, res.status == 404 ? "not_found_error" : "invalid_request_error"));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr failure) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(failure);
        } catch (const std::exception& error) {
          message = error.what();
        } catch (...) {
        }
        std::fprintf(stderr, "mla serve: internal error: %s\n", message.c_str());
        send_json(res, 500, error_body(message, "internal_error"));
      });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const engine::EngineSnapshot snapshot = engine.snapshot();
    send_json(res, 200,
              {{"status", "ok"},
               {"model", context.model_name},
               {"requests_live", snapshot.live_requests},
               {"requests_waiting", snapshot.waiting_requests},
               {"sequences_running", snapshot.running_sequences},
               {"kv_cache_pages_used", snapshot.pages_used},
               {"kv_cache_pages_total", snapshot.pages_total}});
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", context.model_name},
                                      {"object", "model"},
                                      {"created", 0},
                                      {"owned_by", "mla.cpp"},
                                      {"max_model_len", context.max_model_len}}})}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(engine.metrics(), engine.snapshot(), context.model_name),
                    "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kCompletions, req, res);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kChatCompletions, req, res);
  });
}

void HttpServer::Impl::generate(Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
  auto job = std::make_shared<Job>();
  try {
    job->request = parse_request(endpoint, req.body, context);
  } catch (const ApiError& error) {
    send_error(res, error);
    return;
  }
  const uint64_t number = next_id++;
  job->id =
      fmt::format("{}-{}", endpoint == Endpoint::kChatCompletions ? "chatcmpl" : "cmpl", number);
  job->created = unix_seconds();
  try {
    for (const auto& prompt : job->request.prompts)
      job->streams.push_back(engine.submit({prompt, job->request.options}));
  } catch (const engine::QueueFullError& error) {
    for (const auto& stream : job->streams) engine.cancel(stream->id());
    send_error(res, ApiError(429, error.what(), "", "rate_limit_error", "queue_full"));
    return;
  } catch (const Error& error) {
    for (const auto& stream : job->streams) engine.cancel(stream->id());
    send_error(res, ApiError(400, error.what()));
    return;
  }
  const size_t num_choices = job->request.prompts.size() * size_t(job->n());
  job->choices.resize(num_choices);
  job->started.assign(num_choices, false);
  job->text_offsets.assign(num_choices, 0);

  if (!job->request.stream) {
    while (!job->all_done())
      for (auto& [index, update] : job->take(std::chrono::milliseconds(200))) {
        ChoiceOutput& choice = job->choices[index];
        choice.text += update.text;
        for (auto& token : update.tokens) choice.tokens.push_back(std::move(token));
        if (update.finish) choice.finish = update.finish;
        if (!update.error.empty()) choice.error = update.error;
      }
    for (const ChoiceOutput& choice : job->choices)
      if (choice.finish == engine::FinishReason::kError) {
        send_json(res, 500, error_body("generation failed: " + choice.error, "internal_error"));
        return;
      }
    send_json(res, 200,
              response_json(job->request, job->id, job->created, context.model_name, job->choices,
                            job->usage(), context.tokenizer));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job](size_t, httplib::DataSink& sink) { return pump(*job, sink); },
      [this, job](bool) {
        // However the response ended (done, a failed write, a stopped server): whatever still
        // runs is cancelled, which frees its pages.
        for (const auto& stream : job->streams)
          if (!stream->done()) engine.cancel(stream->id());
      });
}

// Writes what arrived as SSE events; false ends the response (the client is gone).
bool HttpServer::Impl::pump(Job& job, httplib::DataSink& sink) {
  auto send = [&](const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    return sink.write(event.data(), event.size());
  };
  if (job.finished_sent) {
    sink.done();
    return true;
  }
  const auto updates = job.take(options.heartbeat);
  if (updates.empty() && !job.all_done()) {
    static const std::string keep_alive = ": keep-alive\n\n";
    return sink.write(keep_alive.data(), keep_alive.size());
  }
  const bool want_logprobs = job.request.options.sampling.logprobs >= 0;
  for (const auto& [index, update] : updates) {
    ChoiceOutput& choice = job.choices[index];
    for (const auto& token : update.tokens) choice.tokens.push_back(token);
    if (update.finish) choice.finish = update.finish;
    if (update.finish == engine::FinishReason::kError) {
      if (!send(error_body("generation failed: " + update.error, "internal_error").dump()))
        return false;
      continue;
    }
    if (update.text.empty() && !update.finish && !(want_logprobs && !update.tokens.empty()))
      continue;
    const json chunk = chunk_json(job.request, job.id, job.created, context.model_name, index,
                                  update.text, update.tokens, !job.started[index], update.finish,
                                  context.tokenizer, job.text_offsets[index]);
    job.started[index] = true;
    for (const auto& token : update.tokens)
      job.text_offsets[index] += static_cast<int>(
          context.tokenizer
              ? context.tokenizer->decode(std::span<const int32_t>(&token.id, 1)).size()
              : 0);
    if (!send(chunk.dump(-1, ' ', false, json::error_handler_t::replace))) return false;
  }
  if (job.all_done()) {
    if (job.request.include_usage &&
        !send(usage_chunk_json(job.request, job.id, job.created, context.model_name, job.usage())
                  .dump()))
      return false;
    if (!send("[DONE]")) return false;
    job.finished_sent = true;
    sink.done();
  }
  return true;
}

HttpServer::HttpServer(engine::Engine& engine, const ApiContext& context,
                       const ServerOptions& options)
    : impl_(std::make_unique<Impl>(engine, context, options)) {
  impl_->routes();
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind() {
  const ServerOptions& options = impl_->options;
  int port = options.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(options.host);
    if (port <= 0) throw_error("cannot listen on {} (any port)", options.host);
  } else if (!impl_->http.bind_to_port(options.host, options.port)) {
    throw_error("cannot listen on {}:{} (is the port in use, or the address not this machine's?)",
                options.host, options.port);
  }
  // cpp-httplib 0.11 listens with a backlog of 5, which a burst of clients overflows (their
  // connections are then refused or reset): listen again with a deep one.
  if (impl_->listen_socket >= 0) ::listen(impl_->listen_socket, 1024);
  return port;
}

void HttpServer::serve() {
  impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace mla::server
