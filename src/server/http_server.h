// HttpServer: the OpenAI-compatible HTTP front of an Engine (cpp-httplib, one thread per
// connection from a pool): POST /v1/completions and /v1/chat/completions (JSON, or Server-Sent
// Events with `stream: true`, ending in `data: [DONE]`), GET /v1/models, /health and /metrics
// (Prometheus text). With an API key every route but /health needs `Authorization: Bearer KEY`.
//
// The subtle thing: a client that goes away is noticed only when a write to it fails, so a
// stream writes an SSE comment (": keep-alive") whenever it has been quiet for `heartbeat`; the
// failed write ends the response, and the response's release cancels whatever of the request is
// still running, which frees its pages. Every error a client causes is an HTTP 4xx with an
// OpenAI-style body, and the server keeps serving.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/api.h"

namespace mla::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (bind() says which)
  std::string api_key;     // empty: no authentication
  int http_threads = 256;  // connections served at once (streams hold one each)
  std::chrono::milliseconds heartbeat{500};
};

class HttpServer {
 public:
  // `engine` must outlive the server; `context` says what the API serves.
  HttpServer(engine::Engine& engine, const ApiContext& context, const ServerOptions& options);
  ~HttpServer();

  // Binds the listening socket; returns the port. Throws mla::Error when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla::server
