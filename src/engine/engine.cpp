// The engine thread and its door; see engine.h.
#include "engine/engine.h"

#include <cstdio>

namespace mla::engine {
namespace {

StepRecord step_record(const StepSchedule& step) {
  StepRecord record;
  record.num_sequences = static_cast<int>(step.batch.sequences.size());
  record.num_tokens = static_cast<int>(step.batch.token_ids.size());
  record.num_decode_tokens = step.num_decode_tokens;
  for (const model::SequenceSlice& slice : step.batch.sequences)
    if (slice.first_token < step.num_decode_tokens)
      record.decode_context_tokens += slice.num_cached + 1;
  return record;
}

}  // namespace

Engine::Engine(ModelRunner& runner, const EngineOptions& options,
               const tokenizer::Tokenizer* tokenizer)
    : runner_(runner),
      options_(options),
      tokenizer_(tokenizer),
      scheduler_(options.scheduler, runner.num_pages(), runner.vocab_size(), runner.eos_token_ids(),
                 tokenizer, &metrics_) {
  if (options_.max_queued_requests < 1)
    throw_error("max_queued_requests must be >= 1, got {}", options_.max_queued_requests);
  snapshot_.pages_total = runner.num_pages();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestStream> Engine::submit(EngineRequest request) {
  try {
    scheduler_.validate(request);
  } catch (const Error&) {
    ++metrics_.requests_rejected;
    throw;
  }
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw_error("the server is shutting down");
    const int64_t queued = static_cast<int64_t>(inbox_.size()) + metrics_.requests_waiting;
    if (queued >= options_.max_queued_requests) {
      ++metrics_.requests_rejected;
      throw QueueFullError(
          fmt::format("the server's queue is full ({} requests waiting); retry later", queued));
    }
    stream = std::make_shared<RequestStream>(next_id_++, request.options.n,
                                             static_cast<int>(request.prompt.size()));
    ++metrics_.requests_received;
    metrics_.prompt_tokens += request.prompt.size();
    inbox_.push_back({std::move(request), stream, Clock::now()});
    ++snapshot_.live_requests;
  }
  wake_.notify_all();
  return stream;
}

void Engine::cancel(uint64_t request_id) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(request_id);
  }
  wake_.notify_all();
}

EngineSnapshot Engine::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout, [&] { return snapshot_.live_requests == 0; });
}

void Engine::loop() {
  for (;;) {
    std::deque<Submission> arrived;
    std::vector<uint64_t> cancelled;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || scheduler_.has_work();
      });
      if (stopping_) break;
      arrived.swap(inbox_);
      cancelled.swap(cancels_);
    }
    // Requests first, so a cancel that raced its own submission finds the request.
    for (Submission& submission : arrived)
      scheduler_.add(std::move(submission.request), std::move(submission.stream),
                     submission.arrival);
    for (uint64_t id : cancelled) scheduler_.cancel(id);
    std::string error;
    if (scheduler_.has_work()) {
      const auto step_start = Clock::now();
      StepSchedule step = scheduler_.schedule();
      try {
        MLA_CHECK(!step.empty());  // a sequence always fits alone: someone can run
        StepRecord record = step_record(step);
        Clock::time_point run_start;
        if (runner_.samples_on_device()) {
          const std::vector<model::RowSampling> rows = scheduler_.sampling_rows(step);
          run_start = Clock::now();
          const std::vector<model::RowSample> samples =
              runner_.run_and_sample(step.page_copies, step.batch, rows);
          record.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
          scheduler_.complete_sampled(step, samples);
        } else {
          run_start = Clock::now();
          const std::vector<float> logits = runner_.run(step.page_copies, step.batch);
          record.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
          scheduler_.complete(step, logits);
        }
        record.step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
        metrics_.step_log.record(record);
        if (options_.check_invariants) scheduler_.check_invariants();
      } catch (const std::exception& failure) {
        error = failure.what();
        std::fprintf(stderr, "mla engine: step failed, ending its requests: %s\n", error.c_str());
        scheduler_.fail_all(error);
      }
    }
    {
      std::lock_guard lock(mutex_);
      snapshot_.live_requests = static_cast<int>(inbox_.size()) + scheduler_.num_live_requests();
      snapshot_.waiting_requests = scheduler_.num_waiting_requests();
      snapshot_.running_sequences = scheduler_.num_running();
      snapshot_.pages_used = scheduler_.pages().num_used();
      snapshot_.preemptions = scheduler_.num_preemptions();
      if (!error.empty()) snapshot_.last_error = error;
    }
    idle_.notify_all();
  }
  scheduler_.fail_all("the server is shutting down");
}

}  // namespace mla::engine
