// Event timing for benchmarks: the median of many runs, with the L2 cache flushed before each.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "cuda/device.h"

namespace mla::bench {

double median(std::vector<double> values);

// The median over `runs` of one number of each run (get(run)): a per-run summary made whole
// number by number (the timeline, the pair trace).
template <typename Run, typename Get>
double median_over(const std::vector<Run>& runs, const Get& get) {
  std::vector<double> values;
  values.reserve(runs.size());
  for (const Run& run : runs) values.push_back(double(get(run)));
  return median(std::move(values));
}

// What runs before every timed or traced run: a memset of 256 MB (five times the H200's L2), its
// value changing from run to run, evicts the L2.
inline constexpr size_t kL2FlushBytes = size_t(256) << 20;
class L2Flush {
 public:
  explicit L2Flush(size_t bytes = kL2FlushBytes) : buffer_(bytes) {}
  // Enqueues the flush before run `run` on `stream`.
  void enqueue(cudaStream_t stream, size_t run);

 private:
  cuda::DeviceBuffer<uint8_t> buffer_;
};

// Times `work` (enqueued on `stream`) `runs` times after `warmup` untimed runs; before each run an
// L2Flush (outside the timed region). Returns the median in microseconds.
class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream, size_t flush_bytes = kL2FlushBytes);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  double median_us(const std::function<void()>& work, int runs, int warmup = 3,
                   bool flush_l2 = true);

  // Several variants of one job, timed in rotating order within every round (so clock and
  // temperature drift during a long measurement falls on all of them alike); one median each.
  std::vector<double> median_us_interleaved(const std::vector<std::function<void()>>& works,
                                            int runs, int warmup = 3);

 private:
  cudaStream_t stream_;
  L2Flush flush_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace mla::bench
