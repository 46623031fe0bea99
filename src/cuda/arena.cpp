// Out-of-line part of src/cuda/arena.h.
#include "cuda/arena.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "cuda/check.h"

namespace mla::cuda {

DeviceArena::DeviceArena(size_t capacity_bytes) : capacity_(capacity_bytes) {
  if (capacity_ > 0) MLA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), capacity_));
}

DeviceArena::DeviceArena(DeviceArena&& other) noexcept {
  *this = std::move(other);
}

DeviceArena& DeviceArena::operator=(DeviceArena&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) cudaFree(base_);
    base_ = std::exchange(other.base_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
    peak_ = std::exchange(other.peak_, 0);
  }
  return *this;
}

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) cudaFree(base_);
}

void* DeviceArena::allocate(size_t bytes, const std::string& what) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded > capacity_ - used_)
    throw_error(
        "device arena: {} needs {:.1f} MiB but only {:.1f} of {:.1f} MiB are free (a step's "
        "activations outgrew the arena: lower the token budget or raise the arena size)",
        what, rounded / 1048576.0, (capacity_ - used_) / 1048576.0, capacity_ / 1048576.0);
  void* result = base_ + used_;
  used_ += rounded;
  peak_ = std::max(peak_, used_);
  return result;
}

void DeviceArena::rewind(size_t mark) {
  MLA_CHECK_LE(mark, used_);
  used_ = mark;
}

}  // namespace mla::cuda
