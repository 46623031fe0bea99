// Request parsing and response bodies of the OpenAI-compatible API; see api.h.
#include "server/api.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace mla::server {
namespace {

using nlohmann::json;

constexpr int kMaxPrompts = 64;
constexpr int kMaxStopStrings = 16;

// The field's value, or null when it is absent or JSON null (OpenAI treats both as "not given").
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

double get_number(const json& body, const char* name, double fallback, double low, double high) {
  const json* value = field(body, name);
  if (!value) return fallback;
  if (!value->is_number()) bad(name, fmt::format("'{}' must be a number", name));
  const double number = value->get<double>();
  if (!(number >= low && number <= high))
    bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, low, high, number));
  return number;
}

int64_t get_integer(const json& body, const char* name, int64_t fallback, int64_t low,
                    int64_t high) {
  const json* value = field(body, name);
  if (!value) return fallback;
  if (!value->is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name));
  if (value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(high))
    bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, low, high, value->dump()));
  const int64_t number = value->get<int64_t>();
  if (number < low || number > high)
    bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, low, high, number));
  return number;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* value = field(body, name);
  if (!value) return fallback;
  if (!value->is_boolean()) bad(name, fmt::format("'{}' must be true or false", name));
  return value->get<bool>();
}

std::vector<int32_t> token_ids(const json& list, const std::string& param,
                               const ApiContext& context) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    if (!item.is_number_integer()) bad(param, fmt::format("'{}[{}]' must be a token id", param, i));
    const int64_t id = item.is_number_unsigned() && item.get<uint64_t>() > uint64_t(INT32_MAX)
                           ? -1
                           : item.get<int64_t>();
    if (id < 0 || id >= context.vocab_size)
      bad(param, fmt::format("'{}[{}]' = {} is not a token id of this model (0..{})", param, i,
                             item.dump(), context.vocab_size - 1));
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) bad(param, fmt::format("'{}' is empty", param));
  return ids;
}

std::vector<int32_t> encode_text(const std::string& text, const std::string& param,
                                 const ApiContext& context, bool add_bos_from_config) {
  if (text.empty()) bad(param, fmt::format("'{}' is empty", param));
  if (!context.tokenizer)
    bad(param, "this model directory has no tokenizer.json: send the prompt as token ids");
  std::vector<int32_t> ids;
  try {
    ids = add_bos_from_config ? context.tokenizer->encode(text)
                              : context.tokenizer->encode(text, /*add_bos=*/false);
  } catch (const Error& error) {
    bad(param, error.what());
  }
  if (ids.empty()) bad(param, fmt::format("'{}' encodes to no tokens", param));
  for (int32_t id : ids)
    if (id >= context.vocab_size)
      bad(param, fmt::format("'{}' encodes to token {}, outside this model's vocabulary (0..{})",
                             param, id, context.vocab_size - 1));
  return ids;
}

std::vector<std::vector<int32_t>> parse_prompt(const json& body, const ApiContext& context) {
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  if (prompt->is_string())
    return {encode_text(prompt->get<std::string>(), "prompt", context, true)};
  if (!prompt->is_array())
    bad("prompt", "'prompt' must be a string, a list of strings or a list of token ids");
  if (prompt->empty()) bad("prompt", "'prompt' is empty");
  if (prompt->front().is_number()) return {token_ids(*prompt, "prompt", context)};
  if (prompt->size() > kMaxPrompts)
    bad("prompt",
        fmt::format("at most {} prompts per request, got {}", kMaxPrompts, prompt->size()));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < prompt->size(); ++i) {
    const json& item = (*prompt)[i];
    const std::string param = fmt::format("prompt[{}]", i);
    if (item.is_string())
      prompts.push_back(encode_text(item.get<std::string>(), param, context, true));
    else if (item.is_array())
      prompts.push_back(token_ids(item, param, context));
    else
      bad("prompt", fmt::format("'{}' must be a string or a list of token ids", param));
  }
  return prompts;
}

std::vector<int32_t> parse_messages(const json& body, const ApiContext& context) {
  const json* messages = field(body, "messages");
  if (!messages) bad("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty())
    bad("messages", "'messages' must be a non-empty list of {role, content} objects");
  if (!context.chat_template)
    bad("messages",
        "this model has no chat template mla.cpp can render (tokenizer_config.json): use "
        "/v1/completions");
  std::vector<tokenizer::ChatMessage> chat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!message.is_object()) bad(param, fmt::format("'{}' must be an object", param));
    const json* role = field(message, "role");
    if (!role || !role->is_string()) bad(param, fmt::format("'{}.role' must be a string", param));
    tokenizer::ChatMessage out;
    out.role = role->get<std::string>();
    if (out.role == "developer") out.role = "system";  // OpenAI's newer name for it
    if (field(message, "tool_calls"))
      bad(param, "assistant tool calls are not supported by this server");
    const json* content = field(message, "content");
    if (!content) {
      if (out.role != "assistant") bad(param, fmt::format("'{}.content' is required", param));
    } else if (content->is_string()) {
      out.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        const json* type = part.is_object() ? field(part, "type") : nullptr;
        const json* text = part.is_object() ? field(part, "text") : nullptr;
        if (!type || *type != "text" || !text || !text->is_string())
          bad(param, fmt::format("'{}.content' parts must be {{\"type\": \"text\", \"text\": ...}} "
                                 "(this model reads text only)",
                                 param));
        out.content += text->get<std::string>();
      }
    } else {
      bad(param, fmt::format("'{}.content' must be a string or a list of text parts", param));
    }
    chat.push_back(std::move(out));
  }
  std::string rendered;
  try {
    rendered = context.chat_template->render(chat, /*add_generation_prompt=*/true);
  } catch (const Error& error) {
    bad("messages", error.what());
  }
  // The template writes the BOS text itself.
  return encode_text(rendered, "messages", context, /*add_bos_from_config=*/false);
}

void refuse_unsupported(const json& body, Endpoint endpoint) {
  if (get_bool(body, "echo", false)) bad("echo", "'echo' is not supported by this server");
  if (field(body, "suffix")) bad("suffix", "'suffix' is not supported by this server");
  if (const json* bias = field(body, "logit_bias"); bias && !bias->empty())
    bad("logit_bias", "'logit_bias' is not supported by this server");
  if (const json* tools = field(body, "tools"); tools && !tools->empty())
    bad("tools", "tool calls are not supported by this server");
  if (const json* format = field(body, "response_format")) {
    const json* type = format->is_object() ? field(*format, "type") : nullptr;
    if (!type || *type != "text")
      bad("response_format", "only {\"type\": \"text\"} responses are supported");
  }
  (void)endpoint;
}

}  // namespace

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

json error_body(const ApiError& error) {
  return error_body(error.what(), error.type, error.param, error.code);
}

ParsedRequest parse_request(Endpoint endpoint, const std::string& body_text,
                            const ApiContext& context) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& error) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", error.what()));
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");

  const json* model = field(body, "model");
  if (!model) bad("model", "'model' is required");
  if (!model->is_string()) bad("model", "'model' must be a string");
  if (model->get<std::string>() != context.model_name)
    throw ApiError(400,
                   fmt::format("the model '{}' does not exist; this server serves '{}'",
                               model->get<std::string>(), context.model_name),
                   "model", "invalid_request_error", "model_not_found");
  refuse_unsupported(body, endpoint);

  ParsedRequest request;
  request.endpoint = endpoint;
  request.prompts = endpoint == Endpoint::kCompletions
                        ? parse_prompt(body, context)
                        : std::vector<std::vector<int32_t>>{parse_messages(body, context)};

  engine::RequestOptions& options = request.options;
  engine::SamplingOptions& sampling = options.sampling;
  sampling.temperature = static_cast<float>(get_number(body, "temperature", 1.0, 0.0, 2.0));
  sampling.top_p = static_cast<float>(get_number(body, "top_p", 1.0, 0.0, 1.0));
  if (sampling.top_p == 0.0f) bad("top_p", "'top_p' must be in (0, 1], got 0");
  // vLLM writes "no limit" as -1.
  const int64_t top_k = get_integer(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  sampling.min_p = static_cast<float>(get_number(body, "min_p", 0.0, 0.0, 1.0));
  sampling.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0, -2, 2));
  sampling.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0, -2, 2));
  sampling.repetition_penalty =
      static_cast<float>(get_number(body, "repetition_penalty", 1.0, 0.01, 100.0));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    sampling.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                               : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (endpoint == Endpoint::kCompletions) {
    sampling.logprobs =
        static_cast<int>(get_integer(body, "logprobs", -1, 0, engine::kMaxLogprobs));
  } else {
    const bool logprobs = get_bool(body, "logprobs", false);
    const int top = static_cast<int>(get_integer(body, "top_logprobs", 0, 0, engine::kMaxLogprobs));
    if (field(body, "top_logprobs") && !logprobs)
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    sampling.logprobs = logprobs ? top : -1;
  }

  options.n = static_cast<int>(get_integer(body, "n", 1, 1, context.max_n));
  if (const int64_t best_of = get_integer(body, "best_of", options.n, 1, context.max_n);
      best_of != options.n)
    bad("best_of", "'best_of' other than n is not supported by this server");
  const char* max_tokens_name =
      endpoint == Endpoint::kChatCompletions && field(body, "max_completion_tokens")
          ? "max_completion_tokens"
          : "max_tokens";
  const int64_t longest_prompt = [&] {
    size_t longest = 0;
    for (const auto& prompt : request.prompts) longest = std::max(longest, prompt.size());
    return static_cast<int64_t>(longest);
  }();
  // Chat without max_tokens may fill the context, as OpenAI's does; completions default to 16.
  const int64_t default_max_tokens =
      endpoint == Endpoint::kChatCompletions
          ? std::max<int64_t>(1, context.max_model_len - longest_prompt)
          : 16;
  options.max_tokens = static_cast<int>(get_integer(body, max_tokens_name, default_max_tokens, 1,
                                                    std::numeric_limits<int32_t>::max()));
  if (longest_prompt + options.max_tokens > context.max_model_len)
    throw ApiError(400,
                   fmt::format("the prompt ({} tokens) plus {} ({}) is more than this model's "
                               "context of {} tokens: shorten the prompt or lower {}",
                               longest_prompt, max_tokens_name, options.max_tokens,
                               context.max_model_len, max_tokens_name),
                   max_tokens_name, "invalid_request_error", "context_length_exceeded");

  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      options.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= kMaxStopStrings) {
      for (const json& item : *stop) {
        if (!item.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        options.stop.push_back(item.get<std::string>());
      }
    } else {
      bad("stop",
          fmt::format("'stop' must be a string or a list of at most {} strings", kMaxStopStrings));
    }
    for (const std::string& text : options.stop)
      if (text.empty()) bad("stop", "stop strings must not be empty");
    if (!options.stop.empty() && !context.tokenizer)
      bad("stop", "stop strings need a tokenizer, and this model has none (use stop_token_ids)");
  }
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    if (!ids->empty()) options.stop_token_ids = token_ids(*ids, "stop_token_ids", context);
  }
  options.ignore_eos = get_bool(body, "ignore_eos", false);
  options.skip_special_tokens = get_bool(body, "skip_special_tokens", true);
  options.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output", false);

  request.stream = get_bool(body, "stream", false);
  if (const json* stream_options = field(body, "stream_options")) {
    if (!stream_options->is_object()) bad("stream_options", "'stream_options' must be an object");
    request.include_usage = get_bool(*stream_options, "include_usage", false);
  }
  try {
    engine::check_sampling_options(sampling);
  } catch (const Error& error) {
    bad("", error.what());
  }
  return request;
}

std::string finish_reason_text(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kCancelled:
      return "abort";
    case engine::FinishReason::kError:
      return "error";
  }
  return "error";
}

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

namespace {

std::string token_text(int32_t id, const tokenizer::Tokenizer* tokenizer) {
  if (!tokenizer) return fmt::format("token_id:{}", id);
  // Lossy per token (a token may hold part of a UTF-8 character); bytes carry the rest.
  return tokenizer->decode(std::span<const int32_t>(&id, 1));
}

json token_bytes(int32_t id, const tokenizer::Tokenizer* tokenizer) {
  json bytes = json::array();
  if (tokenizer)
    for (unsigned char byte : tokenizer->token_bytes(id)) bytes.push_back(int(byte));
  return bytes;
}

}  // namespace

json logprobs_json(Endpoint endpoint, const std::vector<engine::GeneratedToken>& tokens,
                   const engine::RequestOptions& options, const tokenizer::Tokenizer* tokenizer,
                   int text_offset) {
  if (options.sampling.logprobs < 0) return nullptr;
  if (endpoint == Endpoint::kChatCompletions) {
    json content = json::array();
    for (const auto& token : tokens) {
      json top = json::array();
      for (const auto& [id, logprob] : token.logprobs.top)
        top.push_back({{"token", token_text(id, tokenizer)},
                       {"logprob", logprob},
                       {"bytes", token_bytes(id, tokenizer)}});
      content.push_back({{"token", token_text(token.id, tokenizer)},
                         {"logprob", token.logprobs.logprob},
                         {"bytes", token_bytes(token.id, tokenizer)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json texts = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (const auto& token : tokens) {
    const std::string text = token_text(token.id, tokenizer);
    texts.push_back(text);
    logprobs.push_back(token.logprobs.logprob);
    json top = json::object();
    for (const auto& [id, logprob] : token.logprobs.top) top[token_text(id, tokenizer)] = logprob;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += static_cast<int>(text.size());
  }
  return {{"tokens", texts},
          {"token_logprobs", logprobs},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json response_json(const ParsedRequest& request, const std::string& id, int64_t created,
                   const std::string& model, const std::vector<ChoiceOutput>& choices,
                   const Usage& usage, const tokenizer::Tokenizer* tokenizer) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  json out_choices = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& choice = choices[i];
    json item = {
        {"index", i},
        {"logprobs", logprobs_json(request.endpoint, choice.tokens, request.options, tokenizer)},
        {"finish_reason",
         choice.finish ? json(finish_reason_text(*choice.finish)) : json(nullptr)}};
    if (chat)
      item["message"] = {{"role", "assistant"}, {"content", choice.text}};
    else
      item["text"] = choice.text;
    out_choices.push_back(std::move(item));
  }
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", out_choices},
          {"usage", usage_json(usage)}};
}

json chunk_json(const ParsedRequest& request, const std::string& id, int64_t created,
                const std::string& model, int index, const std::string& text,
                const std::vector<engine::GeneratedToken>& tokens, bool first,
                std::optional<engine::FinishReason> finish, const tokenizer::Tokenizer* tokenizer,
                int text_offset) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  json choice = {{"index", index},
                 {"logprobs",
                  logprobs_json(request.endpoint, tokens, request.options, tokenizer, text_offset)},
                 {"finish_reason", finish ? json(finish_reason_text(*finish)) : json(nullptr)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || !finish) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({std::move(choice)})}};
}

json usage_chunk_json(const ParsedRequest& request, const std::string& id, int64_t created,
                      const std::string& model, const Usage& usage) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

}  // namespace mla::server
