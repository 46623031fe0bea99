// Engine: the scheduler's step loop on its own thread, and the thread-safe door to it. HTTP
// handlers (or any thread) submit requests and get a RequestStream to wait on, and may cancel;
// the engine thread takes new requests and cancels between steps, runs schedule() → the model →
// complete(), and sleeps when there is nothing to do.
//
// The subtle thing: a cancel is applied before the next step starts (the engine thread wakes for
// it at once when idle), so a cancelled request's pages are free within one step's time, and a
// step that throws (a bug or a backend failure) ends every live request with an error (their
// streams close) while the engine keeps serving new ones.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/metrics.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace mla::engine {

struct EngineOptions {
  SchedulerOptions scheduler;
  int max_queued_requests = 256;  // requests waiting to be admitted; submit() refuses beyond
  bool check_invariants = false;  // Scheduler::check_invariants() after every step
};

// submit() when max_queued_requests are already waiting (HTTP 429).
class QueueFullError : public Error {
 public:
  using Error::Error;
};

struct EngineSnapshot {
  int live_requests = 0;  // submitted and not finished
  int waiting_requests = 0;
  int running_sequences = 0;
  int pages_used = 0;
  int pages_total = 0;
  int64_t preemptions = 0;
  std::string last_error;  // of the last step that failed, if any
};

class Engine {
 public:
  // `runner` and `tokenizer` (may be null) must outlive the engine. Starts the engine thread.
  Engine(ModelRunner& runner, const EngineOptions& options, const tokenizer::Tokenizer* tokenizer);
  ~Engine();  // stops the thread; requests still live end with FinishReason::kError
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. Throws mla::Error for a request that can never run (the
  // message is for the client) and QueueFullError when the queue is full.
  std::shared_ptr<RequestStream> submit(EngineRequest request);
  void cancel(uint64_t request_id);

  EngineMetrics& metrics() { return metrics_; }
  const EngineOptions& options() const { return options_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_; }
  int vocab_size() const { return runner_.vocab_size(); }
  EngineSnapshot snapshot() const;
  // Waits until no request is live; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout) const;

 private:
  void loop();

  ModelRunner& runner_;
  EngineOptions options_;
  const tokenizer::Tokenizer* tokenizer_;
  EngineMetrics metrics_;
  Scheduler scheduler_;  // engine thread only (validate() reads only what never changes)

  mutable std::mutex mutex_;
  mutable std::condition_variable wake_;  // engine thread: work arrived / stop
  mutable std::condition_variable idle_;  // waiters of wait_idle(): a step ended
  struct Submission {
    EngineRequest request;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point arrival;
  };
  std::deque<Submission> inbox_;
  std::vector<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  EngineSnapshot snapshot_;
  std::thread thread_;
};

}  // namespace mla::engine
