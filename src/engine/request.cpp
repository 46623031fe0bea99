// RequestStream and finish reasons; see request.h.
#include "engine/request.h"

#include "core/error.h"

namespace mla::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

bool RequestStream::wait(std::vector<ChoiceUpdate>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return false;
  while (!queue_.empty()) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return true;
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return finished_ == num_choices_ && queue_.empty();
}

int RequestStream::cached_prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return cached_prompt_tokens_;
}

void RequestStream::push(ChoiceUpdate update) {
  {
    std::lock_guard lock(mutex_);
    if (update.finish) {
      ++finished_;
      MLA_CHECK_LE(finished_, num_choices_);
    }
    queue_.push_back(std::move(update));
  }
  ready_.notify_all();
}

void RequestStream::set_cached_prompt_tokens(int tokens) {
  std::lock_guard lock(mutex_);
  cached_prompt_tokens_ = tokens;
}

}  // namespace mla::engine
