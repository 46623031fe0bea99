// DeviceArena: one device allocation handed out by a bump pointer and released as a whole.
//
// The CUDA backend takes every per-step tensor and workspace from an arena reset at the start of
// each step, so a step allocates nothing from the driver and the same sequence of requests gets the
// same addresses every time: what lets a captured CUDA graph be replayed on a later step. The
// arena never grows (growing would move memory a graph points into); a request past its capacity
// throws mla::Error saying how much was asked and how much there is.
#pragma once

#include <cstddef>
#include <string>

namespace mla::cuda {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;

  DeviceArena() = default;
  explicit DeviceArena(size_t capacity_bytes);
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  DeviceArena(DeviceArena&& other) noexcept;
  DeviceArena& operator=(DeviceArena&& other) noexcept;
  ~DeviceArena();

  // `bytes` rounded up to kAlignment; `what` names the request in the error when full.
  void* allocate(size_t bytes, const std::string& what);
  void reset() { used_ = 0; }
  // Everything allocated after used() returned `mark` is free again (a scope's scratch).
  void rewind(size_t mark);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }  // the most ever in use at once

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
};

}  // namespace mla::cuda
