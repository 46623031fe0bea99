// The continuous-batching scheduler; see scheduler.h for the step and docs/architecture.md for the
// request lifecycle and page ownership it keeps.
#include "engine/scheduler.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace mla::engine {

struct RequestState {
  std::shared_ptr<RequestStream> stream;
  RequestOptions options;
  Clock::time_point arrival;
  int unfinished = 0;
  bool counted_cache_hit = false;
};

namespace {

int pages_for(int64_t tokens, int page_size) {
  return static_cast<int>((tokens + page_size - 1) / page_size);
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, int num_pages, int vocab_size,
                     std::vector<int32_t> eos_token_ids, const tokenizer::Tokenizer* tokenizer,
                     EngineMetrics* metrics)
    : options_(options),
      allocator_(num_pages),
      vocab_size_(vocab_size),
      eos_token_ids_(std::move(eos_token_ids)),
      tokenizer_(tokenizer),
      metrics_(metrics),
      seed_source_(std::random_device{}()) {
  if (options_.max_num_batched_tokens < 1)
    throw_error("max_num_batched_tokens must be >= 1, got {}", options_.max_num_batched_tokens);
  if (options_.max_num_seqs < 1)
    throw_error("max_num_seqs must be >= 1, got {}", options_.max_num_seqs);
  if (options_.max_model_len < 2)
    throw_error("max_model_len must be >= 2, got {}", options_.max_model_len);
  if (pages_for(options_.max_model_len, allocator_.page_size()) + 1 > num_pages)
    throw_error(
        "max_model_len {} needs {} pages of {} tokens (plus one to copy on write), but the cache "
        "has {} pages: give the cache more pages or lower max_model_len",
        options_.max_model_len, pages_for(options_.max_model_len, allocator_.page_size()),
        allocator_.page_size(), num_pages);
  if (metrics_) metrics_->pages_total = num_pages;
}

void Scheduler::validate(const EngineRequest& request) const {
  const RequestOptions& options = request.options;
  const int prompt = static_cast<int>(request.prompt.size());
  if (prompt == 0) throw_error("the prompt is empty: give at least one token");
  for (size_t i = 0; i < request.prompt.size(); ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab_size_)
      throw_error("prompt token {} (at {}) is not in the model's vocabulary (0..{})",
                  request.prompt[i], i, vocab_size_ - 1);
  if (options.n < 1 || options.n > options_.max_num_seqs)
    throw_error("n must be in [1, {}] (the server's max_num_seqs), got {}", options_.max_num_seqs,
                options.n);
  if (options.max_tokens < 1) throw_error("max_tokens must be >= 1, got {}", options.max_tokens);
  if (int64_t(prompt) + options.max_tokens > options_.max_model_len)
    throw_error(
        "the prompt ({} tokens) plus max_tokens ({}) is {} tokens, more than this model's context "
        "of {} tokens: shorten the prompt or lower max_tokens",
        prompt, options.max_tokens, int64_t(prompt) + options.max_tokens, options_.max_model_len);
  if (pages_for(prompt, allocator_.page_size()) + options.n > allocator_.num_pages())
    throw_error("the prompt and n = {} choices need more cache pages than the server has ({})",
                options.n, allocator_.num_pages());
  for (int32_t id : options.stop_token_ids)
    if (id < 0 || id >= vocab_size_)
      throw_error("stop token id {} is not in the model's vocabulary (0..{})", id, vocab_size_ - 1);
  if (!options.stop.empty() && !tokenizer_)
    throw_error("stop strings need a tokenizer, and this model has none (use stop token ids)");
  check_sampling_options(options.sampling);
}

void Scheduler::add(EngineRequest request, std::shared_ptr<RequestStream> stream,
                    Clock::time_point arrival) {
  validate(request);
  auto shared = std::make_shared<RequestState>();
  shared->stream = std::move(stream);
  shared->options = request.options;
  shared->arrival = arrival;
  shared->unfinished = request.options.n;
  const uint64_t arrival_number = next_request_++;
  const uint64_t base_seed =
      request.options.sampling.seed ? *request.options.sampling.seed : seed_source_();
  Sequence* leader = nullptr;
  for (int i = 0; i < request.options.n; ++i) {
    const RequestOptions& options = request.options;
    auto sequence =
        std::make_unique<Sequence>(TokenSampler(options.sampling, base_seed + uint64_t(i)),
                                   TextOutput(tokenizer_, options.stop, options.skip_special_tokens,
                                              options.include_stop_str_in_output));
    sequence->request = shared;
    sequence->index = i;
    sequence->order = (arrival_number << 16) | uint64_t(i);
    sequence->state = i == 0 ? SequenceState::kWaiting : SequenceState::kForkPending;
    sequence->tokens = request.prompt;
    sequence->prompt_len = static_cast<int>(request.prompt.size());
    if (i == 0) {
      leader = sequence.get();
      insert_waiting(leader);
    } else {
      leader->followers.push_back(sequence.get());
    }
    sequences_.push_back(std::move(sequence));
  }
  update_gauges();
}

void Scheduler::insert_running(Sequence* sequence) {
  sequence->state = SequenceState::kRunning;
  running_.insert(
      std::upper_bound(running_.begin(), running_.end(), sequence,
                       [](const Sequence* a, const Sequence* b) { return a->order < b->order; }),
      sequence);
}

void Scheduler::insert_waiting(Sequence* sequence) {
  sequence->state = SequenceState::kWaiting;
  waiting_.insert(
      std::upper_bound(waiting_.begin(), waiting_.end(), sequence,
                       [](const Sequence* a, const Sequence* b) { return a->order < b->order; }),
      sequence);
}

int Scheduler::slots_in_use() const {
  int slots = 0;
  for (const Sequence* sequence : running_)
    slots += 1 + static_cast<int>(sequence->followers.size());
  return slots;
}

int Scheduler::num_waiting_requests() const {
  int count = 0;
  for (const Sequence* sequence : waiting_)
    if (sequence->num_generated() == 0 && sequence->index == 0) ++count;
  return count;
}

int Scheduler::num_live_requests() const {
  std::vector<const RequestState*> requests;
  for (const auto& sequence : sequences_) requests.push_back(sequence->request.get());
  std::sort(requests.begin(), requests.end());
  return static_cast<int>(std::unique(requests.begin(), requests.end()) - requests.begin());
}

void Scheduler::release_pages(Sequence* sequence) {
  for (int32_t page : sequence->pages) allocator_.release(page);
  sequence->pages.clear();
  sequence->page_hashes.clear();
  sequence->num_computed = 0;
}

void Scheduler::preempt(Sequence* sequence) {
  MLA_CHECK(sequence->state == SequenceState::kRunning);
  release_pages(sequence);
  running_.erase(std::find(running_.begin(), running_.end(), sequence));
  insert_waiting(sequence);
  ++sequence->num_preemptions;
  ++num_preemptions_;
  if (metrics_) ++metrics_->preemptions;
}

std::optional<int32_t> Scheduler::allocate_or_preempt(const Sequence* for_sequence) {
  for (;;) {
    if (const auto page = allocator_.allocate()) return page;
    Sequence* victim = running_.back();
    if (victim == for_sequence) return std::nullopt;
    preempt(victim);
  }
}

// The page for the one token `sequence` feeds this step (position num_computed): a new page at a
// page boundary, a private copy of a shared page. False when the sequence itself had to be
// preempted (it was the newest running one and no page was left).
bool Scheduler::reserve_decode_page(Sequence* sequence, StepSchedule& step) {
  const int page_size = allocator_.page_size();
  const int index = sequence->num_computed / page_size;
  if (index < static_cast<int>(sequence->pages.size())) {
    const int32_t shared = sequence->pages[index];
    if (allocator_.ref_count(shared) == 1) return true;
    const auto copy = allocate_or_preempt(sequence);
    if (!copy) {
      preempt(sequence);
      return false;
    }
    step.page_copies.push_back({shared, *copy});
    allocator_.release(shared);
    sequence->pages[index] = *copy;
    return true;
  }
  MLA_CHECK_EQ(index, static_cast<int>(sequence->pages.size()));
  const auto page = allocate_or_preempt(sequence);
  if (!page) {
    preempt(sequence);
    return false;
  }
  sequence->pages.push_back(*page);
  return true;
}

// Admits the oldest waiting sequence when the running limit and the free pages allow: takes its
// cached prefix pages and pages for all its tokens. False (nothing changed) otherwise.
bool Scheduler::admit(Sequence* sequence, StepSchedule& step, int budget) {
  const int page_size = allocator_.page_size();
  const int length = static_cast<int>(sequence->tokens.size());
  if (slots_in_use() + 1 + static_cast<int>(sequence->followers.size()) > options_.max_num_seqs)
    return false;
  // The cached prefix: full pages, each found by the chained hash of everything up to its end.
  std::vector<int32_t> matched;
  std::vector<uint64_t> hashes;
  int revived = 0;  // matched pages now free (retaining them takes them off the free list)
  if (options_.enable_prefix_caching) {
    uint64_t parent = 0;
    for (int k = 0; (k + 1) * page_size <= length; ++k) {
      const std::span<const int32_t> tokens(sequence->tokens.data() + k * page_size, page_size);
      const auto page = allocator_.find_cached(parent, tokens);
      if (!page) break;
      matched.push_back(*page);
      parent = kvcache::hash_page(parent, tokens);
      hashes.push_back(parent);
      if (allocator_.ref_count(*page) == 0) ++revived;
    }
  }
  const int matched_tokens = static_cast<int>(matched.size()) * page_size;
  const bool whole_prompt_cached = matched_tokens == length;
  const int new_pages = pages_for(length, page_size) - static_cast<int>(matched.size()) +
                        (whole_prompt_cached ? 1 : 0);
  // The followers' first decode copies the shared last page: keep a page for each.
  const int needed = new_pages + revived + static_cast<int>(sequence->followers.size());
  if (allocator_.num_free() < needed) return false;

  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), sequence));
  for (int32_t page : matched) allocator_.retain(page);
  sequence->pages = matched;
  sequence->page_hashes = hashes;
  sequence->num_computed = matched_tokens;
  if (whole_prompt_cached) {  // feed the last token again, into a private copy of its page
    const auto copy = allocator_.allocate();
    MLA_CHECK(copy.has_value());
    step.page_copies.push_back({sequence->pages.back(), *copy});
    allocator_.release(sequence->pages.back());
    sequence->pages.back() = *copy;
    sequence->num_computed = length - 1;
  }
  while (static_cast<int>(sequence->pages.size()) < pages_for(length, page_size)) {
    const auto page = allocator_.allocate();
    MLA_CHECK(page.has_value());
    sequence->pages.push_back(*page);
  }
  insert_running(sequence);
  RequestState& request = *sequence->request;
  if (metrics_) {
    metrics_->prefix_cache_queried_tokens += length;
    metrics_->prefix_cache_hit_tokens += sequence->num_computed;
  }
  if (!request.counted_cache_hit && sequence->index == 0) {
    request.counted_cache_hit = true;
    request.stream->set_cached_prompt_tokens(
        std::min(sequence->num_computed, sequence->prompt_len));
  }
  const int take = std::min(length - sequence->num_computed, budget);
  step.entries.push_back({sequence, take, false});
  return true;
}

StepSchedule Scheduler::schedule() {
  StepSchedule step;
  int budget = options_.max_num_batched_tokens;
  const int64_t preemptions_before = num_preemptions_;
  // (1) Decodes, oldest first. Preemption takes the newest running sequences, which this loop
  // has not reached yet (or the current one, which is then the newest).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* sequence = running_[i];
    if (static_cast<int>(sequence->tokens.size()) - sequence->num_computed != 1) continue;
    if (!reserve_decode_page(sequence, step)) break;
    step.entries.push_back({sequence, 1, false});
    --budget;
  }
  // (2) Prefill chunks of admitted sequences (their pages were reserved at admission).
  for (Sequence* sequence : running_) {
    if (budget == 0) break;
    const int left = static_cast<int>(sequence->tokens.size()) - sequence->num_computed;
    if (left <= 1) continue;
    const int take = std::min(left, budget);
    step.entries.push_back({sequence, take, false});
    budget -= take;
  }
  // (3) Admission, first come first served; none in a step that had to preempt.
  if (num_preemptions_ == preemptions_before)
    while (budget > 0 && !waiting_.empty()) {
      Sequence* sequence = waiting_.front();
      if (!admit(sequence, step, budget)) break;
      budget -= step.entries.back().num_tokens;
    }

  // The flat batch: one-token sequences first (the model's decode rows), then the rest.
  std::stable_partition(step.entries.begin(), step.entries.end(),
                        [](const StepSchedule::Entry& entry) { return entry.num_tokens == 1; });
  const int page_size = allocator_.page_size();
  model::ForwardBatch& batch = step.batch;
  for (StepSchedule::Entry& entry : step.entries) {
    Sequence& sequence = *entry.sequence;
    model::SequenceSlice slice;
    slice.first_token = static_cast<int>(batch.token_ids.size());
    slice.num_tokens = entry.num_tokens;
    slice.num_cached = sequence.num_computed;
    slice.block_table = sequence.pages;
    for (int j = 0; j < entry.num_tokens; ++j) {
      const int position = sequence.num_computed + j;
      const int32_t page = sequence.pages.at(position / page_size);
      // Copy-on-write holds: a sequence only writes pages it owns alone.
      MLA_CHECK_EQ(allocator_.ref_count(page), 1);
      batch.token_ids.push_back(sequence.tokens[position]);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(int64_t(page) * page_size + position % page_size);
    }
    entry.wants_logits =
        sequence.num_computed + entry.num_tokens == static_cast<int>(sequence.tokens.size());
    if (entry.wants_logits)
      batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
    batch.sequences.push_back(std::move(slice));
    (entry.num_tokens == 1 ? step.num_decode_tokens : step.num_prefill_tokens) += entry.num_tokens;
  }
  update_gauges();
  return step;
}

void Scheduler::publish_full_pages(Sequence* sequence) {
  const int page_size = allocator_.page_size();
  while (static_cast<int>(sequence->page_hashes.size() + 1) * page_size <= sequence->num_computed) {
    const size_t k = sequence->page_hashes.size();
    const uint64_t parent = k == 0 ? 0 : sequence->page_hashes[k - 1];
    const std::span<const int32_t> tokens(sequence->tokens.data() + k * page_size, page_size);
    if (options_.enable_prefix_caching) allocator_.publish(sequence->pages[k], parent, tokens);
    sequence->page_hashes.push_back(kvcache::hash_page(parent, tokens));
  }
}

void Scheduler::fork_followers(Sequence* leader) {
  for (Sequence* follower : leader->followers) {
    MLA_CHECK(follower->state == SequenceState::kForkPending);
    follower->pages = leader->pages;
    for (int32_t page : follower->pages) allocator_.retain(page);
    follower->page_hashes = leader->page_hashes;
    follower->num_computed = leader->num_computed;
    insert_running(follower);
  }
  leader->followers.clear();
}

void Scheduler::complete(const StepSchedule& step, std::span<const float> logits) {
  MLA_CHECK_EQ(logits.size(), step.batch.logit_rows.size() * size_t(vocab_size_));
  complete_with(step, [&](Sequence* choice, int row) {
    const std::span<const float> row_logits =
        logits.subspan(size_t(row) * vocab_size_, vocab_size_);
    const RequestOptions& options = choice->request->options;
    const std::span<const int32_t> prompt(choice->tokens.data(), choice->prompt_len);
    const std::span<const int32_t> generated(choice->tokens.data() + choice->prompt_len,
                                             choice->num_generated());
    GeneratedToken token;
    token.id = choice->sampler.sample(row_logits, prompt, generated,
                                      options.sampling.logprobs >= 0 ? &token.logprobs : nullptr);
    return token;
  });
}

std::vector<model::RowSampling> Scheduler::sampling_rows(const StepSchedule& step) const {
  std::vector<model::RowSampling> rows;
  int row = 0;
  for (const StepSchedule::Entry& entry : step.entries) {
    if (!entry.wants_logits) continue;
    std::vector<const Sequence*> choices = {entry.sequence};
    choices.insert(choices.end(), entry.sequence->followers.begin(),
                   entry.sequence->followers.end());
    for (const Sequence* choice : choices) {
      const SamplingOptions& sampling = choice->sampler.options();
      model::RowSampling r;
      r.logit_row = row;
      kernels::SamplingRowParams& p = r.params;
      p.temperature = sampling.temperature;
      p.top_p = sampling.top_p;
      p.min_p = sampling.min_p;
      p.repetition_penalty = sampling.repetition_penalty;
      p.presence_penalty = sampling.presence_penalty;
      p.frequency_penalty = sampling.frequency_penalty;
      p.top_k = sampling.top_k;
      p.num_logprobs = sampling.logprobs;
      p.seed = choice->sampler.seed();
      p.step = static_cast<uint64_t>(choice->num_generated());
      r.prompt = std::span<const int32_t>(choice->tokens.data(), choice->prompt_len);
      r.generated = std::span<const int32_t>(choice->tokens.data() + choice->prompt_len,
                                             choice->num_generated());
      rows.push_back(r);
    }
    ++row;
  }
  return rows;
}

void Scheduler::complete_sampled(const StepSchedule& step,
                                 std::span<const model::RowSample> samples) {
  size_t next = 0;
  complete_with(step, [&](Sequence*, int) {
    MLA_CHECK_LT(next, samples.size());
    const model::RowSample& sample = samples[next++];
    GeneratedToken token;
    token.id = sample.token;
    token.logprobs.logprob = sample.logprob;
    token.logprobs.top = sample.top;
    return token;
  });
  MLA_CHECK_EQ(next, samples.size());
}

void Scheduler::complete_with(const StepSchedule& step,
                              const std::function<GeneratedToken(Sequence*, int)>& draw) {
  if (metrics_) {
    ++metrics_->steps;
    metrics_->prefill_tokens_computed += step.num_prefill_tokens;
  }
  int row = 0;
  for (const StepSchedule::Entry& entry : step.entries) {
    Sequence* sequence = entry.sequence;
    MLA_CHECK(sequence->state == SequenceState::kRunning);
    sequence->num_computed += entry.num_tokens;
    publish_full_pages(sequence);
    if (!entry.wants_logits) continue;
    std::vector<Sequence*> choices = {sequence};
    choices.insert(choices.end(), sequence->followers.begin(), sequence->followers.end());
    fork_followers(sequence);
    // Draw every choice's token first, then emit: emitting may finish a choice.
    std::vector<GeneratedToken> tokens;
    for (Sequence* choice : choices) tokens.push_back(draw(choice, row));
    for (size_t i = 0; i < choices.size(); ++i) emit(choices[i], std::move(tokens[i]));
    ++row;
  }
  remove_finished();
  update_gauges();
}

void Scheduler::emit(Sequence* sequence, GeneratedToken token) {
  RequestState& request = *sequence->request;
  const RequestOptions& options = request.options;
  sequence->tokens.push_back(token.id);

  const Clock::time_point now = Clock::now();
  token.emitted = now;
  if (metrics_) {
    ++metrics_->generated_tokens;
    if (sequence->num_generated() == 1)
      metrics_->time_to_first_token.observe(
          std::chrono::duration<double>(now - request.arrival).count());
    else
      metrics_->inter_token_latency.observe(
          std::chrono::duration<double>(now - sequence->last_token_time).count());
  }
  sequence->last_token_time = now;

  ChoiceUpdate update;
  update.index = sequence->index;
  update.tokens.push_back(token);
  const bool is_eos = !options.ignore_eos && std::find(eos_token_ids_.begin(), eos_token_ids_.end(),
                                                       token.id) != eos_token_ids_.end();
  const bool is_stop_token =
      is_eos || std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token.id) !=
                    options.stop_token_ids.end();
  if (is_stop_token) {
    update.text = sequence->text.finish();
    update.stop = fmt::format("token:{}", token.id);
    finish(sequence, FinishReason::kStop, std::move(update));
    return;
  }
  TextOutput::Piece piece = sequence->text.push(token.id);
  update.text = std::move(piece.text);
  if (piece.stopped) {
    update.stop = piece.matched_stop;
    finish(sequence, FinishReason::kStop, std::move(update));
    return;
  }
  if (sequence->num_generated() >= options.max_tokens ||
      static_cast<int>(sequence->tokens.size()) >= options_.max_model_len) {
    update.text += sequence->text.finish();
    finish(sequence, FinishReason::kLength, std::move(update));
    return;
  }
  request.stream->push(std::move(update));
}

// Ends one choice: frees its pages (followers still waiting to fork end with it), sends the last
// update. The sequence object is removed at the end of the step (remove_finished).
void Scheduler::finish(Sequence* sequence, FinishReason reason, ChoiceUpdate update) {
  const std::string error = update.error;
  std::vector<Sequence*> ending = {sequence};
  ending.insert(ending.end(), sequence->followers.begin(), sequence->followers.end());
  sequence->followers.clear();
  for (Sequence* choice : ending) {
    if (choice->state == SequenceState::kRunning) {
      release_pages(choice);
      running_.erase(std::find(running_.begin(), running_.end(), choice));
    } else if (choice->state == SequenceState::kWaiting) {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), choice));
    }
    choice->state = SequenceState::kFinished;
    RequestState& request = *choice->request;
    ChoiceUpdate last;
    if (choice == sequence) {
      last = std::move(update);
    } else {
      last.index = choice->index;
      last.error = error;
    }
    last.finish = reason;
    if (metrics_) {
      ++(reason == FinishReason::kStop        ? metrics_->choices_stop
         : reason == FinishReason::kLength    ? metrics_->choices_length
         : reason == FinishReason::kCancelled ? metrics_->choices_cancelled
                                              : metrics_->choices_error);
    }
    request.stream->push(std::move(last));
    if (--request.unfinished == 0 && metrics_) {
      ++metrics_->requests_finished;
      metrics_->request_latency.observe(
          std::chrono::duration<double>(Clock::now() - request.arrival).count());
    }
  }
}

bool Scheduler::cancel(uint64_t request_id) {
  std::vector<Sequence*> choices;
  for (const auto& sequence : sequences_)
    if (sequence->request->stream->id() == request_id &&
        sequence->state != SequenceState::kFinished &&
        sequence->state != SequenceState::kForkPending)
      choices.push_back(sequence.get());
  for (Sequence* choice : choices) {
    ChoiceUpdate update;
    update.index = choice->index;
    finish(choice, FinishReason::kCancelled, std::move(update));
  }
  remove_finished();
  update_gauges();
  return !choices.empty();
}

void Scheduler::fail_all(const std::string& error) {
  std::vector<Sequence*> choices;
  for (const auto& sequence : sequences_)
    if (sequence->state == SequenceState::kRunning || sequence->state == SequenceState::kWaiting)
      choices.push_back(sequence.get());
  for (Sequence* choice : choices) {
    ChoiceUpdate update;
    update.index = choice->index;
    update.error = error;
    finish(choice, FinishReason::kError, std::move(update));
  }
  remove_finished();
  update_gauges();
}

void Scheduler::remove_finished() {
  std::erase_if(sequences_, [](const std::unique_ptr<Sequence>& sequence) {
    return sequence->state == SequenceState::kFinished;
  });
}

void Scheduler::update_gauges() {
  if (!metrics_) return;
  metrics_->requests_waiting = num_waiting_requests();
  metrics_->sequences_running = static_cast<int64_t>(running_.size());
  metrics_->pages_used = allocator_.num_used();
  metrics_->pages_cached = allocator_.num_cached();
}

void Scheduler::check_invariants() const {
  const int page_size = allocator_.page_size();
  std::vector<int> owners(allocator_.num_pages(), 0);
  std::map<const Sequence*, int> states;
  for (const auto& sequence : sequences_) {
    const Sequence& s = *sequence;
    MLA_CHECK(s.state != SequenceState::kFinished);  // finished ones are removed within the step
    const int length = static_cast<int>(s.tokens.size());
    MLA_CHECK_GE(s.num_generated(), 0);
    MLA_CHECK_LE(length, options_.max_model_len);
    if (s.state != SequenceState::kRunning) {
      // Only running sequences own pages.
      MLA_CHECK(s.pages.empty());
      MLA_CHECK_EQ(s.num_computed, 0);
      continue;
    }
    // A running sequence has pages for all its tokens and one token still to feed.
    MLA_CHECK_LT(s.num_computed, length);
    MLA_CHECK_GE(static_cast<int>(s.pages.size()), (s.num_computed + page_size - 1) / page_size);
    MLA_CHECK_LE(static_cast<int>(s.pages.size()), (length + page_size - 1) / page_size);
    MLA_CHECK_LE(static_cast<int>(s.page_hashes.size()) * page_size, s.num_computed);
    std::vector<int32_t> sorted = s.pages;
    std::sort(sorted.begin(), sorted.end());
    MLA_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no page twice
    for (int32_t page : s.pages) ++owners.at(page);
    for (const Sequence* follower : s.followers)
      MLA_CHECK(follower->state == SequenceState::kForkPending);
  }
  // Every page's reference count is the number of block tables listing it; free pages are
  // exactly the unowned ones (so none leaked, none owned twice).
  allocator_.check(owners);
  int running = 0, waiting = 0;
  for (const auto& sequence : sequences_) {
    running += sequence->state == SequenceState::kRunning;
    waiting += sequence->state == SequenceState::kWaiting;
  }
  MLA_CHECK_EQ(running, static_cast<int>(running_.size()));
  MLA_CHECK_EQ(waiting, static_cast<int>(waiting_.size()));
  MLA_CHECK_LE(slots_in_use(), options_.max_num_seqs);
  MLA_CHECK(
      std::is_sorted(running_.begin(), running_.end(),
                     [](const Sequence* a, const Sequence* b) { return a->order < b->order; }));
  MLA_CHECK(
      std::is_sorted(waiting_.begin(), waiting_.end(),
                     [](const Sequence* a, const Sequence* b) { return a->order < b->order; }));
  for (const Sequence* sequence : running_) MLA_CHECK(sequence->state == SequenceState::kRunning);
  for (const Sequence* sequence : waiting_) MLA_CHECK(sequence->state == SequenceState::kWaiting);
  if (running_.empty() && waiting_.empty()) MLA_CHECK_EQ(allocator_.num_used(), 0);
}

}  // namespace mla::engine
