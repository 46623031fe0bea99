// Thread-block cluster helpers (sm_90): this CTA's rank, a peer CTA's shared-memory address, the
// cluster-wide barrier, stores and mbarrier arrivals into a peer CTA's shared memory, and the
// cluster-scope wait that makes a peer's released writes visible. Each wrapper is one PTX
// instruction (two for the barrier, a retry loop around one for the wait); no policy lives here.
#pragma once

#include <cstdint>

namespace mla::kernels::cluster {

// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t rank() {
  uint32_t value;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(value));
  return value;
}

// The shared::cluster address of the variable at `smem` (this CTA's shared::cta address) in the
// CTA of rank `cta_rank`: every CTA of a kernel has the same layout.
__device__ __forceinline__ uint32_t peer_address(uint32_t smem, uint32_t cta_rank) {
  uint32_t address;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(address) : "r"(smem), "r"(cta_rank));
  return address;
}

// Every thread of every CTA of the cluster: this CTA's earlier memory operations are visible to
// the cluster once all have arrived (release / acquire).
__device__ __forceinline__ void sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// Four floats to the shared::cluster address `address` (16-byte aligned; possibly another CTA's).
__device__ __forceinline__ void store_v4(uint32_t address, float x, float y, float z, float w) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "f"(x), "f"(y),
               "f"(z), "f"(w)
               : "memory");
}

// One arrival on the mbarrier at the shared::cluster address `barrier` (possibly another CTA's),
// releasing this thread's earlier writes at cluster scope.
__device__ __forceinline__ void arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(barrier)
               : "memory");
}

// Blocks until this CTA's mbarrier at `barrier` has completed the phase with this parity, acquiring
// at cluster scope what the arrivals released (a peer CTA's stores into this CTA).
__device__ __forceinline__ void wait_parity(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace mla::kernels::cluster
