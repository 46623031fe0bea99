// The GPU as the program sees it: presence, properties, and owning device buffers.
//
// DeviceBuffer<T> owns a cudaMalloc'd array (move-only). No code outside src/cuda calls cudaMalloc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cuda/check.h"

namespace mla::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int num_sms = 0;
  size_t total_memory_bytes = 0;
  size_t l2_cache_bytes = 0;
  size_t max_shared_memory_per_block_optin = 0;
  int sm_clock_khz = 0;
  int memory_clock_khz = 0;
};

// Number of usable GPUs; 0 when there is no driver or no device (never throws).
int device_count();
// Describes the current device. Throws mla::Error if there is none.
DeviceInfo current_device_info();
// One line for logs: "NVIDIA H200 (sm_90, 132 SMs, 141 GB)".
std::string describe(const DeviceInfo& info);

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_ > 0) MLA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer moved(std::move(other));
    swap(moved);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void copy_from_host(const T* host, size_t count, cudaStream_t stream = nullptr) {
    MLA_CUDA_CHECK(cudaMemcpyAsync(data_, host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
  }
  void copy_from_host(const std::vector<T>& host, cudaStream_t stream = nullptr) {
    copy_from_host(host.data(), host.size(), stream);
  }
  std::vector<T> to_host(cudaStream_t stream = nullptr) const {
    std::vector<T> host(count_);
    if (count_ > 0) {
      MLA_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_, bytes(), cudaMemcpyDeviceToHost, stream));
      MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return host;
  }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
  }
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace mla::cuda
