// Scheduler: continuous batching over one shared page pool. It owns every live sequence (one per
// choice of a request), decides each step's work under a token budget, and after the forward pass
// samples, checks stops and sends updates. Single-threaded: the engine thread (or a test) drives
// schedule() → ModelRunner::run() → complete().
//
// One step: (1) decodes first: every running sequence with one token left to feed, oldest first;
// a page it lacks is allocated, a shared page it would write is copied first (copy-on-write), and
// when no page is free the newest running sequence is preempted (its pages freed; it later
// recomputes prompt + generated tokens, with its sampler state kept, so it ends with the same
// output); (2) prefill chunks of running sequences still prefilling, as the budget allows
// (chunked prefill: a long prompt never stalls the decodes); (3) admission of waiting sequences,
// first come first served, while the budget, the running limit and the free pages allow; an
// admitted sequence takes its cached prefix pages and all the pages its tokens need at once, so a
// prefill never runs out of pages halfway. The subtle thing: a sequence always keeps one token
// not yet in the cache (the last sampled one, or the last prompt token), and the step that feeds
// it returns the logits for the next; a prompt wholly in the prefix cache therefore recomputes
// its last token, into a private copy of the last page. With n > 1 the prompt is prefilled once
// (by choice 0) and the other choices fork from it, sharing its pages.
// Invariants (docs/architecture.md): check_invariants() after any step.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampling.h"
#include "engine/text_output.h"
#include "kvcache/page_allocator.h"
#include "model/step_plan.h"
#include "tokenizer/tokenizer.h"

namespace mla::engine {

using Clock = std::chrono::steady_clock;

struct SchedulerOptions {
  int max_num_batched_tokens = 2048;  // tokens per step (decodes and prefill chunks)
  int max_num_seqs = 64;              // running sequences (a request's n choices count n)
  int max_model_len = 4096;           // prompt + generated tokens of one sequence
  bool enable_prefix_caching = true;
};

enum class SequenceState { kWaiting, kRunning, kForkPending, kFinished };

struct RequestState;  // what the choices of one request share (scheduler.cpp)

struct Sequence {
  Sequence(TokenSampler sampler, TextOutput text)
      : sampler(std::move(sampler)), text(std::move(text)) {}

  std::shared_ptr<RequestState> request;
  int index = 0;       // choice
  uint64_t order = 0;  // arrival order, then choice: smaller is older and goes first
  SequenceState state = SequenceState::kWaiting;
  std::vector<int32_t> tokens;  // prompt, then generated
  int prompt_len = 0;
  int num_computed = 0;               // tokens whose latents are in the cache
  std::vector<int32_t> pages;         // block table (owned while running)
  std::vector<uint64_t> page_hashes;  // chained hashes of its full pages [0, size())
  TokenSampler sampler;
  TextOutput text;
  std::vector<Sequence*> followers;  // choices waiting to fork from this one's prompt
  Clock::time_point last_token_time;
  int num_preemptions = 0;

  int num_generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

struct StepSchedule {
  struct Entry {
    Sequence* sequence = nullptr;
    int num_tokens = 0;  // fed this step, from sequence->num_computed on
    bool wants_logits = false;
  };
  std::vector<Entry> entries;  // in batch order (one-token sequences first)
  std::vector<PageCopy> page_copies;
  model::ForwardBatch batch;
  int num_decode_tokens = 0;
  int num_prefill_tokens = 0;
  bool empty() const { return entries.empty(); }
};

class Scheduler {
 public:
  // `tokenizer` may be null (no text, no stop strings); `metrics` may be null.
  Scheduler(const SchedulerOptions& options, int num_pages, int vocab_size,
            std::vector<int32_t> eos_token_ids, const tokenizer::Tokenizer* tokenizer,
            EngineMetrics* metrics);

  // Throws mla::Error (a message for the client) when the request can never run.
  void validate(const EngineRequest& request) const;
  // Queues a validated request; its updates go to `stream`.
  void add(EngineRequest request, std::shared_ptr<RequestStream> stream, Clock::time_point arrival);
  // Ends every choice of the request now, freeing its pages; false when it is not live.
  bool cancel(uint64_t request_id);
  // Ends every live request with FinishReason::kError (after a failed step).
  void fail_all(const std::string& error);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  StepSchedule schedule();
  // `logits`: [entries wanting logits, vocab], in batch order.
  void complete(const StepSchedule& step, std::span<const float> logits);
  // Device sampling: what to draw for each choice of the step, and completing the step with the
  // draws (one per sampling row, in that order) instead of logits.
  std::vector<model::RowSampling> sampling_rows(const StepSchedule& step) const;
  void complete_sampled(const StepSchedule& step, std::span<const model::RowSample> samples);

  // Throws mla::InternalError on a broken invariant (docs/architecture.md).
  void check_invariants() const;

  const kvcache::PageAllocator& pages() const { return allocator_; }
  const SchedulerOptions& options() const { return options_; }
  int num_waiting_requests() const;  // requests none of whose choices runs yet
  int num_live_requests() const;
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_live_sequences() const { return static_cast<int>(sequences_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  bool admit(Sequence* sequence, StepSchedule& step, int budget);
  bool reserve_decode_page(Sequence* sequence, StepSchedule& step);
  std::optional<int32_t> allocate_or_preempt(const Sequence* for_sequence);
  void preempt(Sequence* sequence);
  void release_pages(Sequence* sequence);
  void publish_full_pages(Sequence* sequence);
  void fork_followers(Sequence* leader);
  // Runs the step's bookkeeping; `draw(choice, logit_row)` gives each choice's next token.
  void complete_with(const StepSchedule& step,
                     const std::function<GeneratedToken(Sequence*, int)>& draw);
  void emit(Sequence* sequence, GeneratedToken token);
  void finish(Sequence* sequence, FinishReason reason, ChoiceUpdate update);
  void insert_running(Sequence* sequence);
  void insert_waiting(Sequence* sequence);
  int slots_in_use() const;
  void update_gauges();
  void remove_finished();

  SchedulerOptions options_;
  kvcache::PageAllocator allocator_;
  int vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  const tokenizer::Tokenizer* tokenizer_;
  EngineMetrics* metrics_;
  std::mt19937_64 seed_source_;
  uint64_t next_request_ = 0;
  int64_t num_preemptions_ = 0;
  std::vector<std::unique_ptr<Sequence>> sequences_;  // every live one
  std::vector<Sequence*> running_;                    // oldest first
  std::deque<Sequence*> waiting_;                     // oldest first
};

}  // namespace mla::engine
