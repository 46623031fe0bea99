// What the engine counts for /metrics: counters, gauges (set after every step) and latency
// histograms (time to first token, inter-token latency, end-to-end). Safe to read from any thread
// while the engine thread writes; the server renders it as Prometheus text.
//
// Histograms keep cumulative-ready bucket counts with Prometheus' `le` semantics (a value equal
// to a bound lands in that bucket). StepLog keeps one small record per model step (always on: a
// lock and a copy per step), for benchmarks that need step times by kind and size.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace mla::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket (not cumulative); one more for +Inf
    uint64_t count = 0;
    double sum = 0.0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

// Mean, median and p99 of very many latencies (a benchmark's inter-token gaps) in fixed memory:
// counts in 10-µs bins up to 10 s (4 MB, touched at construction), values past that kept
// exactly. Percentiles take the nearest-rank convention of the exact ones (median: the mean of
// the two middle values for an even count; p99: the value of rank ceil(0.99 n)), each value read
// as its bin's middle, so within 5 µs of exact; the mean is exact. add() is safe from any thread
// (relaxed atomics); summary() wants the adders stopped.
class LatencySpread {
 public:
  static constexpr double kBinSeconds = 10e-6;
  static constexpr size_t kBins = 1000000;  // 10 s
  LatencySpread();
  void add(double seconds);

  struct Summary {
    uint64_t count = 0;
    double mean = 0, median = 0, p99 = 0;  // seconds
  };
  Summary summary() const;

 private:
  // The values of these 1-based ranks in sorted order (ranks ascending).
  std::vector<double> values_at_ranks(const std::vector<uint64_t>& ranks) const;
  std::vector<std::atomic<uint32_t>> bins_;
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> sum_ns_{0};
  mutable std::mutex overflow_mutex_;
  std::vector<double> overflow_;  // >= 10 s, sorted by summary()
};

// One model step as the engine ran it.
struct StepRecord {
  double seconds = 0;         // the ModelRunner call: page copies, forward, logits (or samples)
  double step_seconds = 0;    // the whole step: schedule, the runner, sampling and updates
  int num_sequences = 0;      // sequences in the batch
  int num_tokens = 0;         // rows of the batch
  int num_decode_tokens = 0;  // decode rows (one per decoding sequence)
  int64_t decode_context_tokens = 0;  // keys the decode rows read (cached tokens + 1, summed)
  bool decode_only() const { return num_tokens > 0 && num_decode_tokens == num_tokens; }
};

// The last `capacity` step records (a ring: the oldest go first).
class StepLog {
 public:
  explicit StepLog(size_t capacity = size_t(1) << 16);
  void record(const StepRecord& step);
  std::vector<StepRecord> snapshot() const;  // oldest first
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<StepRecord> ring_;
  size_t capacity_;
  size_t next_ = 0;  // where the next record goes once the ring is full
};

struct EngineMetrics {
  // Counters.
  std::atomic<uint64_t> requests_received{0};  // accepted by submit()
  std::atomic<uint64_t> requests_rejected{0};  // refused by submit() (invalid or queue full)
  std::atomic<uint64_t> requests_finished{0};  // every choice ended
  std::atomic<uint64_t> choices_stop{0}, choices_length{0}, choices_cancelled{0}, choices_error{0};
  std::atomic<uint64_t> prompt_tokens{0};  // of accepted requests
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> prefill_tokens_computed{0};  // prompt (and recomputed) tokens run
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<uint64_t> prefix_cache_queried_tokens{0};
  std::atomic<uint64_t> prefix_cache_hit_tokens{0};
  // Gauges.
  std::atomic<int64_t> requests_waiting{0};  // queue depth: submitted, not yet admitted
  std::atomic<int64_t> sequences_running{0};
  std::atomic<int64_t> pages_used{0};
  std::atomic<int64_t> pages_total{0};
  std::atomic<int64_t> pages_cached{0};  // holding a published prefix (owned or free)
  // Latencies, in seconds.
  Histogram time_to_first_token{
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram inter_token_latency{
      {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  Histogram request_latency{{0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  StepLog step_log;
};

}  // namespace mla::engine
