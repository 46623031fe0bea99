// Out-of-line part of src/cuda/device.h.
#include "cuda/device.h"

#include "core/error.h"

namespace mla::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" status
    return 0;
  }
  return count;
}

DeviceInfo current_device_info() {
  if (device_count() == 0) throw Error("no CUDA GPU found (cudaGetDeviceCount reports none)");
  DeviceInfo info;
  MLA_CUDA_CHECK(cudaGetDevice(&info.ordinal));
  cudaDeviceProp prop{};
  MLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, info.ordinal));
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.total_memory_bytes = prop.totalGlobalMem;
  info.l2_cache_bytes = static_cast<size_t>(prop.l2CacheSize);
  info.max_shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&info.sm_clock_khz, cudaDevAttrClockRate, info.ordinal));
  MLA_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.memory_clock_khz, cudaDevAttrMemoryClockRate, info.ordinal));
  return info;
}

std::string describe(const DeviceInfo& info) {
  return fmt::format("{} (sm_{}{}, {} SMs, {:.0f} GB)", info.name, info.compute_major,
                     info.compute_minor, info.num_sms, info.total_memory_bytes / 1e9);
}

}  // namespace mla::cuda
