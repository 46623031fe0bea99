// A request as the engine sees it (prompt ids and options), what it sends back per step (one
// ChoiceUpdate per choice that made progress), and RequestStream: the thread-safe queue between
// the engine thread (producer) and whoever waits for the request (consumer: an HTTP handler).
//
// The subtle thing: every choice of a request ends with exactly one update whose `finish` is
// set, whatever ends it (stop, length, cancel, an engine error), so a consumer that waits for
// all finishes never hangs; after the last one the stream is done().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling.h"

namespace mla::engine {

struct RequestOptions {
  SamplingOptions sampling;
  int max_tokens = 16;                  // generated tokens per choice, >= 1
  int n = 1;                            // choices: the prompt is prefilled once and forked
  std::vector<int32_t> stop_token_ids;  // besides the model's eos (unless ignore_eos)
  std::vector<std::string> stop;        // stop strings (need a tokenizer)
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  RequestOptions options;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct GeneratedToken {
  int32_t id = 0;
  TokenLogprobs logprobs;                         // filled when the request asked for logprobs
  std::chrono::steady_clock::time_point emitted;  // when the engine produced it (latency figures)
};

struct ChoiceUpdate {
  int index = 0;                       // choice 0..n-1
  std::vector<GeneratedToken> tokens;  // generated since the last update of this choice
  std::string text;                    // text to show since the last update
  std::optional<FinishReason> finish;  // set on the choice's last update
  std::string stop;                    // the stop string or "token:<id>" that finished it
  std::string error;                   // with FinishReason::kError: what went wrong
};

class RequestStream {
 public:
  RequestStream(uint64_t id, int num_choices, int prompt_tokens)
      : id_(id), num_choices_(num_choices), prompt_tokens_(prompt_tokens) {}

  uint64_t id() const { return id_; }
  int num_choices() const { return num_choices_; }
  int prompt_tokens() const { return prompt_tokens_; }

  // --- Consumer.
  // Moves every queued update into `out` (appending); waits up to `timeout` for one. False when
  // nothing arrived in time.
  bool wait(std::vector<ChoiceUpdate>& out, std::chrono::milliseconds timeout);
  // Every choice finished and every update taken.
  bool done() const;
  // Prompt tokens the prefix cache supplied (known once the request was admitted).
  int cached_prompt_tokens() const;

  // --- Producer (the engine thread).
  void push(ChoiceUpdate update);
  void set_cached_prompt_tokens(int tokens);

 private:
  const uint64_t id_;
  const int num_choices_;
  const int prompt_tokens_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ChoiceUpdate> queue_;
  int finished_ = 0;
  int cached_prompt_tokens_ = 0;
};

}  // namespace mla::engine
