// Histogram, LatencySpread and StepLog; see metrics.h.
#include "engine/metrics.h"

#include <algorithm>
#include <cmath>
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

LatencySpread::LatencySpread() : bins_(kBins) {
  for (std::atomic<uint32_t>& bin : bins_) bin.store(0, std::memory_order_relaxed);
}

void LatencySpread::add(double seconds) {
  seconds = std::max(seconds, 0.0);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<int64_t>(std::llround(seconds * 1e9)), std::memory_order_relaxed);
  const double bin = seconds / kBinSeconds;
  if (bin < static_cast<double>(kBins)) {
    bins_[static_cast<size_t>(bin)].fetch_add(1, std::memory_order_relaxed);
  } else {
    const std::lock_guard<std::mutex> lock(overflow_mutex_);
    overflow_.push_back(seconds);
  }
}

std::vector<double> LatencySpread::values_at_ranks(const std::vector<uint64_t>& ranks) const {
  std::vector<double> over;
  {
    const std::lock_guard<std::mutex> lock(overflow_mutex_);
    over = overflow_;
  }
  std::sort(over.begin(), over.end());
  std::vector<double> values;
  uint64_t seen = 0;  // values in the bins before b
  size_t b = 0;
  for (const uint64_t rank : ranks) {  // ascending: one walk over the bins for all of them
    while (b < kBins && seen + bins_[b].load(std::memory_order_relaxed) < rank)
      seen += bins_[b++].load(std::memory_order_relaxed);
    if (b < kBins) {
      values.push_back((static_cast<double>(b) + 0.5) * kBinSeconds);
    } else {
      const uint64_t index = rank - seen - 1;
      values.push_back(index < over.size() ? over[index] : (over.empty() ? 0.0 : over.back()));
    }
  }
  return values;
}

LatencySpread::Summary LatencySpread::summary() const {
  Summary s;
  s.count = count_.load(std::memory_order_relaxed);
  if (s.count == 0) return s;
  s.mean = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9 / s.count;
  const uint64_t n = s.count;
  const uint64_t p99_rank = std::min(
      n, std::max<uint64_t>(static_cast<uint64_t>(std::ceil(0.99 * static_cast<double>(n))), 1));
  // The median's one or two middle ranks, then p99's (never below them).
  const std::vector<double> v = values_at_ranks({(n + 1) / 2, n / 2 + 1, p99_rank});
  s.median = n % 2 == 1 ? v[1] : 0.5 * (v[0] + v[1]);
  s.p99 = v[2];
  return s;
}

}  // namespace mla::engine
