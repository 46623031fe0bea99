// Event timing for benchmarks: the median of many runs, with the L2 cache flushed before each.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "cuda/device.h"

namespace mla::bench {

double median(std::vector<double> values);

// Times `work` (enqueued on `stream`) `runs` times after `warmup` untimed runs; before each run a
// 256 MB memset evicts the L2 (outside the timed region). Returns the median in microseconds.
class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream, size_t flush_bytes = size_t(256) << 20);
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
  cuda::DeviceBuffer<uint8_t> flush_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace mla::bench
