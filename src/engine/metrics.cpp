// Histogram and StepLog; see metrics.h.
#include "engine/metrics.h"

#include <algorithm>
#include <cstddef>

namespace mla::engine {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  ++count_;
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard lock(mutex_);
  return {bounds_, counts_, count_, sum_};
}

StepLog::StepLog(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void StepLog::record(const StepRecord& step) {
  std::lock_guard lock(mutex_);
  if (ring_.size() < capacity_) {
    ring_.push_back(step);
    return;
  }
  ring_[next_] = step;
  next_ = (next_ + 1) % capacity_;
}

std::vector<StepRecord> StepLog::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<StepRecord> out(ring_.begin() + static_cast<std::ptrdiff_t>(next_), ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(next_));
  return out;
}

void StepLog::clear() {
  std::lock_guard lock(mutex_);
  ring_.clear();
  next_ = 0;
}

}  // namespace mla::engine
