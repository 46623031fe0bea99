// EventTimer; see timing.h.
#include "bench/timing.h"

#include <algorithm>

#include "core/error.h"

namespace mla::bench {

double median(std::vector<double> values) {
  MLA_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

void L2Flush::enqueue(cudaStream_t stream, size_t run) {
  MLA_CUDA_CHECK(cudaMemsetAsync(buffer_.data(), int(run & 0xff), buffer_.bytes(), stream));
}

EventTimer::EventTimer(cudaStream_t stream, size_t flush_bytes)
    : stream_(stream), flush_(flush_bytes) {}

EventTimer::~EventTimer() {
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
}

double EventTimer::median_us(const std::function<void()>& work, int runs, int warmup,
                             bool flush_l2) {
  MLA_CHECK_GE(runs, 1);
  while (events_.size() < size_t(2 * runs)) {
    cudaEvent_t event;
    MLA_CUDA_CHECK(cudaEventCreate(&event));
    events_.push_back(event);
  }
  for (int i = 0; i < warmup; ++i) work();
  for (int i = 0; i < runs; ++i) {
    if (flush_l2) flush_.enqueue(stream_, size_t(i));
    MLA_CUDA_CHECK(cudaEventRecord(events_[2 * i], stream_));
    work();
    MLA_CUDA_CHECK(cudaEventRecord(events_[2 * i + 1], stream_));
  }
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    float ms = 0.f;
    MLA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
    times.push_back(ms * 1000.0);
  }
  return median(times);
}

std::vector<double> EventTimer::median_us_interleaved(
    const std::vector<std::function<void()>>& works, int runs, int warmup) {
  MLA_CHECK_GE(runs, 1);
  const size_t count = works.size();
  const size_t timed = count * size_t(runs);
  while (events_.size() < 2 * timed) {
    cudaEvent_t event;
    MLA_CUDA_CHECK(cudaEventCreate(&event));
    events_.push_back(event);
  }
  for (const auto& work : works)
    for (int i = 0; i < warmup; ++i) work();
  std::vector<size_t> slot_work(timed);
  size_t slot = 0;
  for (int round = 0; round < runs; ++round) {
    for (size_t j = 0; j < count; ++j, ++slot) {
      const size_t which = (size_t(round) + j) % count;
      slot_work[slot] = which;
      flush_.enqueue(stream_, slot);
      MLA_CUDA_CHECK(cudaEventRecord(events_[2 * slot], stream_));
      works[which]();
      MLA_CUDA_CHECK(cudaEventRecord(events_[2 * slot + 1], stream_));
    }
  }
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<std::vector<double>> times(count);
  for (size_t s = 0; s < timed; ++s) {
    float ms = 0.f;
    MLA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * s], events_[2 * s + 1]));
    times[slot_work[s]].push_back(ms * 1000.0);
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(t));
  return medians;
}

}  // namespace mla::bench
