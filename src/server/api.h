// The OpenAI-compatible API without the HTTP: request bodies of /v1/completions and
// /v1/chat/completions parsed and validated into engine requests, and the response, stream chunk
// and error bodies built back. Pure functions (no sockets, no engine), so the parser can be fuzzed
// and every bad input tested directly.
//
// Accepted fields: model, prompt (a string, a list of strings, a list of token ids or a list of
// such lists) or messages (role + content as a string or a list of text parts), max_tokens (chat
// also max_completion_tokens), temperature, top_p, n, stop (string or list), seed, stream,
// stream_options.include_usage, logprobs (completions: an int, the top-n; chat: a bool with
// top_logprobs), presence_penalty, frequency_penalty, and vLLM's extensions top_k, min_p,
// repetition_penalty, ignore_eos, stop_token_ids, skip_special_tokens, include_stop_str_in_output.
// Fields the API has but mla.cpp does not serve (echo, suffix, best_of > n, logit_bias, tools)
// are refused with 400 rather than ignored; unknown fields are ignored, as OpenAI's clients send
// extras. The subtle thing: OpenAI numbers the choices of several prompts prompt-major
// (index = prompt · n + choice), and the parser keeps that order.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mla::server {

// An error the client gets back: HTTP status and an OpenAI-style body.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param;
  std::string type;
  std::string code;
};

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
nlohmann::json error_body(const std::string& message, const std::string& type,
                          const std::string& param = "", const std::string& code = "");
nlohmann::json error_body(const ApiError& error);

enum class Endpoint { kCompletions, kChatCompletions };

// What the parser needs to know about the server.
struct ApiContext {
  std::string model_name;
  const tokenizer::Tokenizer* tokenizer = nullptr;         // null: token-id prompts only
  const tokenizer::ChatTemplate* chat_template = nullptr;  // null: no chat
  int vocab_size = 0;
  int max_model_len = 0;
  int max_n = 16;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<std::vector<int32_t>> prompts;  // one engine request each
  engine::RequestOptions options;             // shared by all prompts
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
};

// Throws ApiError (400, naming the field) for anything wrong with the body.
ParsedRequest parse_request(Endpoint endpoint, const std::string& body, const ApiContext& context);

// One choice's output, accumulated from the engine's updates.
struct ChoiceOutput {
  std::string text;
  std::vector<engine::GeneratedToken> tokens;
  std::optional<engine::FinishReason> finish;
  std::string error;
};

// "stop", "length" (or "abort"/"error" for the engine's other endings).
std::string finish_reason_text(engine::FinishReason reason);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};
nlohmann::json usage_json(const Usage& usage);

// The logprobs object of a choice (completions: tokens/token_logprobs/top_logprobs/text_offset;
// chat: content[]), over `tokens`; null when logprobs were not asked for.
nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<engine::GeneratedToken>& tokens,
                             const engine::RequestOptions& options,
                             const tokenizer::Tokenizer* tokenizer, int text_offset = 0);

// The whole response of a request that is not streamed.
nlohmann::json response_json(const ParsedRequest& request, const std::string& id, int64_t created,
                             const std::string& model, const std::vector<ChoiceOutput>& choices,
                             const Usage& usage, const tokenizer::Tokenizer* tokenizer);

// One stream chunk with one choice's new text (and tokens, for logprobs), or its finish; chat's
// first chunk of a choice carries the role. `usage` chunks have no choices.
nlohmann::json chunk_json(const ParsedRequest& request, const std::string& id, int64_t created,
                          const std::string& model, int index, const std::string& text,
                          const std::vector<engine::GeneratedToken>& tokens, bool first,
                          std::optional<engine::FinishReason> finish,
                          const tokenizer::Tokenizer* tokenizer, int text_offset);
nlohmann::json usage_chunk_json(const ParsedRequest& request, const std::string& id,
                                int64_t created, const std::string& model, const Usage& usage);

}  // namespace mla::server
