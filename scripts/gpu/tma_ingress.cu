// A diagnostic for the lent H200, built and run by scripts/gpu/tma-ingress.sh (not part of the
// build): how fast one SM takes in TMA tiled copies shaped like the decode kernels' page blocks
// (one 64-column block of a 64-token MLA page: 64 rows of 128 B, 1,152 B apart, the 128-byte
// swizzle; 8 KB a box), with k boxes in flight, on one SM alone and on every SM at once, from a
// pool of pages that fits in L2 and from one far larger than L2; then in rounds, unicast boxes of
// 64 and 32 rows and 64-row boxes multicast to 2-CTA clusters; then boxes of 1, 3 and 9 column
// blocks through a 4-D view of the pool (one TMA instruction for a third of a page or all of it);
// then 8 KB boxes issued by 1, 2, 4 or 8 warps of a CTA; then bursts of 5, 9 or 18 boxes issued
// at once by one thread, a warp's lanes or as many warps; then distributed shared memory between
// the CTAs of 2-CTA clusters (remote stores, with the duo experiment's handshake, and by bulk
// copy).
//
// One thread per CTA issues boxes and waits for them on k mbarriers (box i in slot i mod k); a
// CTA asks for 150 KB of shared memory, so no two share an SM. Printed per configuration: the
// median over CTAs of bytes per SM cycle (clock64 around the loop), cycles per box, and the
// whole grid's GB/s (CUDA events). Never changes GPU settings. The barriers are the kernels'
// (common/tma.cuh) and the maps cuda::make_tensor_map_bf16()'s; the copies are written out here
// (3-D, multicast and without an L2 hint, which the kernels do not use).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <exception>

#include "common/tma.cuh"
#include "cuda/tensor_map.h"

namespace tma = mla::kernels::tma;

#define CHECK(call)                                                                        \
  do {                                                                                     \
    const cudaError_t error_ = (call);                                                     \
    if (error_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(error_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

constexpr int kCols = 576;            // bf16 columns of a cache row
constexpr int kTokens = 64;           // rows of a page
constexpr int kRowBytes = kCols * 2;  // 1,152
constexpr int kPageBytes = kTokens * kRowBytes;
constexpr int kBoxBytes = kTokens * 128;  // 64 rows × 64 columns bf16
constexpr int kBlocksPerPage = kCols / 64;
constexpr int kSmemBytes = 150 * 1024;  // one CTA per SM
constexpr int kMaxInFlight = 18;

__device__ uint32_t smem_u32(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// `count` mbarriers of one arrival each, then the fence that publishes their initialisation.
__device__ void init_barriers(uint64_t* barriers, int count) {
  for (int s = 0; s < count; ++s) tma::barrier_init(smem_u32(&barriers[s]), 1);
  tma::fence_barrier_init();
}

// The page of a CTA's `visit`-th page: visits spread over the pool.
__device__ int page_of(unsigned cta, int visit, int num_pages) {
  return static_cast<int>((cta * 7919u + visit * 104729u) % static_cast<unsigned>(num_pages));
}

// One 3-D tiled copy: the box at {column, 0, page} of `map` into `dst`, completing its bytes on
// `barrier` (announced by the caller).
__device__ void copy_box(uint32_t dst, const CUtensorMap& map, uint32_t barrier, int column,
                         int page) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(column), "r"(0), "r"(page), "r"(barrier)
      : "memory");
}

// `count` copies through `in_flight` slots: copy i is issued once copy i − in_flight has landed.
template <typename Issue, typename Wait>
__device__ void pipeline(int count, int in_flight, const Issue& issue, const Wait& wait) {
  for (int i = 0; i < count; ++i) {
    if (i >= in_flight) wait(i - in_flight);
    issue(i);
  }
  for (int i = count > in_flight ? count - in_flight : 0; i < count; ++i) wait(i);
}

__global__ void __launch_bounds__(32)
    ingress_kernel(const __grid_constant__ CUtensorMap map, int num_pages, int in_flight, int boxes,
                   unsigned long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t barriers[kMaxInFlight];
  if (threadIdx.x != 0) return;
  init_barriers(barriers, in_flight);

  auto issue = [&](int i) {
    const int slot = i % in_flight;
    const uint32_t barrier = smem_u32(&barriers[slot]);
    tma::arrive_expect_bytes(barrier, kBoxBytes);
    // Pages spread over the pool, each page's nine blocks in order (as the kernels read them).
    const int page = page_of(blockIdx.x, i / kBlocksPerPage, num_pages);
    const int column = (i % kBlocksPerPage) * 64;
    copy_box(smem_u32(smem + slot * kBoxBytes), map, barrier, column, page);
  };
  auto wait = [&](int i) {
    const uint32_t barrier = smem_u32(&barriers[i % in_flight]);
    const uint32_t parity = (i / in_flight) & 1;
    tma::wait_parity(barrier, parity);
  };

  const long long start = clock64();
  pipeline(boxes, in_flight, issue, wait);
  cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - start);
}

// Rounds of `in_flight` boxes: every CTA expects the round's bytes on its barriers, the cluster
// syncs, then each CTA issues its share of the round and waits for all of it. kMulticast (clusters
// of 2): CTA rank r issues boxes i ≡ r (mod 2) of the round to both CTAs of the cluster, so each
// SM's TMA unit issues half the boxes while each SM still receives all of them.
template <bool kMulticast>
__global__ void __launch_bounds__(32)
    ingress_rounds_kernel(const __grid_constant__ CUtensorMap map, int num_pages, int in_flight,
                          int boxes, int rows, unsigned long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t barriers[kMaxInFlight];
  const bool leader = threadIdx.x == 0;
  uint32_t rank = 0;
  if constexpr (kMulticast) asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  const uint32_t cluster = kMulticast ? blockIdx.x / 2 : blockIdx.x;
  if (leader) {
    init_barriers(barriers, in_flight);
  }
  auto cluster_sync = [&]() {
    if constexpr (kMulticast) {
      asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
    } else {
      __syncwarp();
    }
  };
  cluster_sync();
  const int box_bytes = rows * 128;
  const long long start = clock64();
  for (int round = 0; round * in_flight < boxes; ++round) {
    if (leader) {
      for (int s = 0; s < in_flight; ++s)
        tma::arrive_expect_bytes(smem_u32(&barriers[s]), box_bytes);
    }
    cluster_sync();  // every CTA expects this round's bytes before any is sent
    if (leader) {
      for (int s = 0; s < in_flight; ++s) {
        if (kMulticast && (s & 1) != static_cast<int>(rank)) continue;
        const int i = round * in_flight + s;
        const int page = page_of(cluster, i / kBlocksPerPage, num_pages);
        const int column = (i % kBlocksPerPage) * 64;
        const uint32_t destination = smem_u32(smem + s * kBoxBytes);
        const uint32_t barrier = smem_u32(&barriers[s]);
        if constexpr (kMulticast) {
          const uint16_t mask = 0x3;
          asm volatile(
              "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
              ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(destination),
              "l"(reinterpret_cast<uint64_t>(&map)), "r"(column), "r"(0), "r"(page), "r"(barrier),
              "h"(mask)
              : "memory");
        } else {
          copy_box(destination, map, barrier, column, page);
        }
      }
      for (int s = 0; s < in_flight; ++s) {
        tma::wait_parity(smem_u32(&barriers[s]), round & 1);
      }
    }
  }
  cluster_sync();  // no CTA leaves while a peer may still write into it
  if (leader) cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - start);
}

// Boxes of several column blocks at once through a 4-D view of the pool {64 columns, 64 tokens,
// 9 column blocks, pages} (byte strides 1,152, 128 and the page's): a box of `blocks` blocks lands
// as `blocks` consecutive 8 KB blocks, each 64 rows of 128 B with the 128-byte swizzle, the
// layout the decode kernels' wgmma reads. Pipelined as ingress_kernel.
__global__ void __launch_bounds__(32)
    ingress_blocks_kernel(const __grid_constant__ CUtensorMap map, int num_pages, int in_flight,
                          int blocks, int boxes, unsigned long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t barriers[kMaxInFlight];
  if (threadIdx.x != 0) return;
  init_barriers(barriers, in_flight);
  const int box_bytes = blocks * kBoxBytes;
  const int boxes_per_page = kBlocksPerPage / blocks;
  auto issue = [&](int i) {
    const int slot = i % in_flight;
    const uint32_t barrier = smem_u32(&barriers[slot]);
    tma::arrive_expect_bytes(barrier, box_bytes);
    const int page = page_of(blockIdx.x, i / boxes_per_page, num_pages);
    const int first_block = (i % boxes_per_page) * blocks;
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_u32(smem + slot * box_bytes)),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(0), "r"(first_block), "r"(page),
        "r"(barrier)
        : "memory");
  };
  auto wait = [&](int i) {
    tma::wait_parity(smem_u32(&barriers[i % in_flight]), (i / in_flight) & 1);
  };
  const long long start = clock64();
  pipeline(boxes, in_flight, issue, wait);
  cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - start);
}

// The 8 KB boxes issued by `warps` warps at once (lane 0 of each): warp w issues boxes
// w, w + warps, ... through its own 16 / warps of the 16 slots, each pipelined as in
// ingress_kernel. Whether one SM's TMA intake grows with the number of issuing threads.
__global__ void __launch_bounds__(256)
    ingress_warps_kernel(const __grid_constant__ CUtensorMap map, int num_pages, int boxes,
                         unsigned long long* cycles) {
  constexpr int kSlots = 16;
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t barriers[kSlots];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32;
  const int per_warp = kSlots / warps;  // slots of this warp: warp · per_warp + k
  if (threadIdx.x == 0) {
    init_barriers(barriers, kSlots);
  }
  __syncthreads();
  const long long start = clock64();
  if (threadIdx.x % 32 == 0) {
    const int mine = (boxes - warp + warps - 1) / warps;  // boxes w, w + warps, ...
    auto slot_of = [&](int n) { return warp * per_warp + n % per_warp; };
    auto wait = [&](int n) {
      tma::wait_parity(smem_u32(&barriers[slot_of(n)]), (n / per_warp) & 1);
    };
    auto issue = [&](int n) {
      const int i = warp + n * warps;
      const uint32_t barrier = smem_u32(&barriers[slot_of(n)]);
      tma::arrive_expect_bytes(barrier, kBoxBytes);
      const int page = page_of(blockIdx.x, i / kBlocksPerPage, num_pages);
      copy_box(smem_u32(smem + slot_of(n) * kBoxBytes), map, barrier, (i % kBlocksPerPage) * 64,
               page);
    };
    pipeline(mine, per_warp, issue, wait);
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - start);
}

// Bursts as the decode kernels' pairs see them: `burst` 8 KB boxes (a half page is 4-5, a page
// 9, a pair's pages 18), each on its own barrier, issued at once by one thread (mode 0), by lanes
// 0..burst-1 of warp 0 (mode 1) or by lane 0 of warps 0..burst-1 (mode 2); thread 0 waits for
// the whole burst, then the CTA syncs and issues the next. Whether the time a burst takes to land
// depends on who issues it, alone and with every SM doing the same.
__global__ void __launch_bounds__(32 * kMaxInFlight)
    ingress_burst_kernel(const __grid_constant__ CUtensorMap map, int num_pages, int burst,
                         int bursts, int mode, unsigned long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t barriers[kMaxInFlight];
  if (threadIdx.x == 0) init_barriers(barriers, burst);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long start = clock64();
  for (int b = 0; b < bursts; ++b) {
    for (int k = 0; k < burst; ++k) {
      const bool mine = mode == 0   ? threadIdx.x == 0
                        : mode == 1 ? warp == 0 && lane == k
                                    : lane == 0 && warp == k;
      if (!mine) continue;
      const uint32_t barrier = smem_u32(&barriers[k]);
      tma::arrive_expect_bytes(barrier, kBoxBytes);
      const int page = page_of(blockIdx.x, b * 2 + k / kBlocksPerPage, num_pages);
      copy_box(smem_u32(smem + k * kBoxBytes), map, barrier, (k % kBlocksPerPage) * 64, page);
    }
    if (threadIdx.x == 0) {
      for (int k = 0; k < burst; ++k) tma::wait_parity(smem_u32(&barriers[k]), b & 1);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - start);
}

// The pool as {576 columns, 64 tokens, pages}, boxes of 64 columns × `box_rows` tokens.
CUtensorMap make_map(void* pool, int num_pages, int box_rows = kTokens) {
  mla::cuda::TensorMapBf16Spec spec;
  spec.base = pool;
  spec.rank = 3;
  spec.dims[0] = kCols;
  spec.dims[1] = kTokens;
  spec.dims[2] = static_cast<uint64_t>(num_pages);
  spec.strides_bytes[0] = kRowBytes;
  spec.strides_bytes[1] = kPageBytes;
  spec.box[0] = 64;
  spec.box[1] = static_cast<uint32_t>(box_rows);
  spec.box[2] = 1;
  return mla::cuda::make_tensor_map_bf16(spec);
}

// The pool as {64 columns, 64 tokens, 9 column blocks, pages}, boxes of `blocks` blocks; false
// (and the driver's refusal printed) when the driver refuses the view's strides.
bool make_blocks_map(void* pool, int num_pages, int blocks, CUtensorMap* map) {
  mla::cuda::TensorMapBf16Spec spec;
  spec.base = pool;
  spec.rank = 4;
  spec.dims[0] = 64;
  spec.dims[1] = kTokens;
  spec.dims[2] = kBlocksPerPage;
  spec.dims[3] = static_cast<uint64_t>(num_pages);
  spec.strides_bytes[0] = kRowBytes;
  spec.strides_bytes[1] = 128;
  spec.strides_bytes[2] = kPageBytes;
  spec.box[0] = 64;
  spec.box[1] = kTokens;
  spec.box[2] = static_cast<uint32_t>(blocks);
  spec.box[3] = 1;
  try {
    *map = mla::cuda::make_tensor_map_bf16(spec);
    return true;
  } catch (const std::exception& error) {  // mla::Error, naming what the driver refused
    std::printf("boxes of %d blocks: %s\n", blocks, error.what());
    return false;
  }
}

// Distributed shared memory between the two CTAs of a 2-CTA cluster (the duo experiment's
// exchange, fifteenth session): each CTA sends `rounds` × 32 KB to its peer, as two groups of 128
// threads that each send 16 KB a round into the peer's buffer of the same group.
//   mode 0: remote 16-byte stores only (st.shared::cluster.v4), no handshake (one cluster barrier
//           at the end): the network's throughput;
//   mode 1: the duo's handshake: wait until the peer has read the previous round, 8 remote stores a
//           thread, an arrival on the peer's "full" mbarrier (release, cluster scope) from every
//           thread; then wait for the own buffer (acquire), read it, arrive on the peer's "empty";
//   mode 2: the same exchange by the bulk copy engine: the group's 16 KB staged in the own shared
//           memory, one cp.async.bulk into the peer's buffer completing on its "full" mbarrier;
//           one thread of the receiver announces the bytes and, after reading, arrives on the
//           sender's "empty".
// Cycles: thread 0's clock64 from the start to after the final cluster barrier.
__global__ void __launch_bounds__(256)
    dsmem_kernel(int rounds, int mode, unsigned long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[2], empty[2];
  constexpr int kGroupBytes = 16 * 1024;
  uint8_t* buffer = smem;                     // [2 groups][16 KB]: what the peer sends
  uint8_t* staging = smem + 2 * kGroupBytes;  // [2 groups][16 KB]: mode 2's outgoing copy
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  const int tid = threadIdx.x, group = tid / 128, tid_in_group = tid % 128;
  if (tid == 0) {
    for (int g = 0; g < 2; ++g) {
      tma::barrier_init(smem_u32(&full[g]), mode == 2 ? 1 : 128);
      tma::barrier_init(smem_u32(&empty[g]), mode == 2 ? 1 : 128);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
  auto peer = [&](const void* local) {
    uint32_t address;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(address)
                 : "r"(smem_u32(local)), "r"(rank ^ 1u));
    return address;
  };
  const uint32_t peer_buffer = peer(buffer + group * kGroupBytes);
  const uint32_t peer_full = peer(&full[group]), peer_empty = peer(&empty[group]);
  const uint32_t my_full = smem_u32(&full[group]), my_empty = smem_u32(&empty[group]);
  auto wait = [&](uint32_t barrier, uint32_t parity) {
    uint32_t done = 0;
    do {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
          "%2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(barrier), "r"(parity)
          : "memory");
    } while (!done);
  };
  auto arrive_remote = [&](uint32_t barrier) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(barrier)
                 : "memory");
  };
  // This thread's 8 × 16 bytes of the group's 16 KB into the peer's buffer.
  auto store_remote = [&](int round) {
    for (int k = 0; k < 8; ++k) {
      asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                       peer_buffer + (k * 128 + tid_in_group) * 16),
                   "f"(float(round))
                   : "memory");
    }
  };
  float sink = 0.f;
  const long long start = clock64();
  for (int round = 0; round < rounds; ++round) {
    if (mode == 0) {
      store_remote(round);
      continue;
    }
    // The peer has read the previous round (mode 2: so the previous copy has read the staging).
    if (round >= 1) wait(my_empty, (round - 1) & 1);
    if (mode == 1) {
      store_remote(round);
      arrive_remote(peer_full);
    } else {
      uint8_t* out = staging + group * kGroupBytes;
      for (int k = 0; k < 8; ++k)
        *reinterpret_cast<float4*>(out + (k * 128 + tid_in_group) * 16) =
            make_float4(round, round, round, round);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + group) : "memory");
      if (tid_in_group == 0) {
        asm volatile(
            "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];\n" ::"r"(peer_buffer),
            "r"(smem_u32(out)), "r"(kGroupBytes), "r"(peer_full)
            : "memory");
        tma::arrive_expect_bytes(my_full, kGroupBytes);
      }
    }
    wait(my_full, round & 1);
    for (int k = 0; k < 8; ++k)
      sink +=
          reinterpret_cast<const float4*>(buffer + group * kGroupBytes)[k * 128 + tid_in_group].x;
    if (mode == 1) {
      arrive_remote(peer_empty);
    } else {
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + group) : "memory");  // all have read
      if (tid_in_group == 0) arrive_remote(peer_empty);
    }
  }
  asm volatile("fence.acq_rel.cluster;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
  if (tid == 0) cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - start);
  if (sink == -1.f) cycles[0] = 0;  // keeps the reads
}

template <typename T>
T median(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// A pool of `pages` zeroed pages.
void* make_pool(int pages) {
  void* data = nullptr;
  CHECK(cudaMalloc(&data, static_cast<size_t>(pages) * kPageBytes));
  CHECK(cudaMemset(data, 0, static_cast<size_t>(pages) * kPageBytes));
  return data;
}

struct Rate {
  double bytes_per_sm_cycle;  // median CTA
  double cycles_per_unit;     // median CTA's cycles / units
  double grid_gbs;            // every CTA's bytes over the launch's event time
};

// Runs `launch` six times (the first warms L2 and the clocks and is not counted); each CTA
// receives `bytes_per_cta` and writes its cycles to `cycles[cta]`. Medians over the five runs.
template <typename Launch>
Rate measure(const Launch& launch, int ctas, double bytes_per_cta, double units,
             unsigned long long* cycles) {
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  std::vector<double> per_sm, per_unit, grid_gbs;
  for (int run = 0; run < 6; ++run) {
    CHECK(cudaEventRecord(begin));
    launch();
    CHECK(cudaEventRecord(end));
    CHECK(cudaGetLastError());
    CHECK(cudaEventSynchronize(end));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    std::vector<unsigned long long> host(ctas);
    CHECK(
        cudaMemcpy(host.data(), cycles, sizeof(unsigned long long) * ctas, cudaMemcpyDeviceToHost));
    if (run == 0) continue;
    const double median_cycles = static_cast<double>(median(host));
    per_sm.push_back(bytes_per_cta / median_cycles);
    per_unit.push_back(median_cycles / units);
    grid_gbs.push_back(bytes_per_cta * ctas / (ms * 1e-3) / 1e9);
  }
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  return {median(per_sm), median(per_unit), median(grid_gbs)};
}

}  // namespace

int main() {
  int device = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  for (const void* kernel : {reinterpret_cast<const void*>(ingress_kernel),
                             reinterpret_cast<const void*>(ingress_rounds_kernel<false>),
                             reinterpret_cast<const void*>(ingress_rounds_kernel<true>),
                             reinterpret_cast<const void*>(ingress_blocks_kernel),
                             reinterpret_cast<const void*>(ingress_warps_kernel),
                             reinterpret_cast<const void*>(ingress_burst_kernel)}) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }
  CHECK(cudaFuncSetAttribute(ingress_rounds_kernel<true>,
                             cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const int boxes = kBlocksPerPage * 256;  // 2,304 boxes, 18.9 MB per CTA
  const double bytes = double(boxes) * kBoxBytes;
  unsigned long long* cycles = nullptr;
  CHECK(cudaMalloc(&cycles, sizeof(unsigned long long) * sms));
  const int l2_pages = 256;  // 18.9 MB: L2-resident after the warm-up run

  std::printf(
      "TMA ingress: boxes of 64 rows × 128 B (8 KB, rows 1,152 B apart, 128-byte "
      "swizzle); %d SMs, nominal SM clock %d MHz\n",
      sms, clock_khz / 1000);
  std::printf("%-6s %5s %9s %12s %12s %12s\n", "pool", "CTAs", "in flight", "B/cycle/SM",
              "cycles/box", "grid GB/s");
  struct Pool {
    const char* name;
    int pages;
  };
  for (const Pool& pool : {Pool{"L2", l2_pages}, Pool{"DRAM", 32768}}) {  // 18.9 MB, 2.4 GB
    void* data = make_pool(pool.pages);
    const CUtensorMap map = make_map(data, pool.pages);
    for (int ctas : {1, sms}) {
      for (int in_flight : {1, 2, 4, 9, 18}) {
        const Rate rate = measure(
            [&] {
              ingress_kernel<<<ctas, 32, kSmemBytes>>>(map, pool.pages, in_flight, boxes, cycles);
            },
            ctas, bytes, boxes, cycles);
        std::printf("%-6s %5d %9d %12.1f %12.1f %12.0f\n", pool.name, ctas, in_flight,
                    rate.bytes_per_sm_cycle, rate.cycles_per_unit, rate.grid_gbs);
      }
    }
    CHECK(cudaFree(data));
  }

  void* data = make_pool(l2_pages);  // the L2 pool for the rest

  // Rounds (every CTA waits for a whole round before the next): unicast boxes of 64 and 32 rows,
  // and 64-row boxes multicast to clusters of 2; every SM.
  std::printf("\nrounds of k boxes, L2 pool, %d CTAs (bytes received per SM)\n", sms);
  std::printf("%-22s %9s %12s %12s %12s\n", "variant", "in flight", "B/cycle/SM", "cycles/box",
              "grid GB/s");
  struct Variant {
    const char* name;
    int rows;
    bool multicast;
  };
  for (const Variant& v :
       {Variant{"unicast, 64 rows", 64, false}, Variant{"unicast, 32 rows", 32, false},
        Variant{"multicast x2, 64 rows", 64, true}}) {
    const CUtensorMap map = make_map(data, l2_pages, v.rows);
    const int ctas = sms - sms % 2;
    for (int in_flight : {2, 9, 18}) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(ctas);
      config.blockDim = dim3(32);
      config.dynamicSmemBytes = kSmemBytes;
      cudaLaunchAttribute attribute[1];
      attribute[0].id = cudaLaunchAttributeClusterDimension;
      attribute[0].val.clusterDim.x = v.multicast ? 2 : 1;
      attribute[0].val.clusterDim.y = 1;
      attribute[0].val.clusterDim.z = 1;
      config.attrs = attribute;
      config.numAttrs = 1;
      const Rate rate = measure(
          [&] {
            if (v.multicast) {
              CHECK(cudaLaunchKernelEx(&config, ingress_rounds_kernel<true>, map, l2_pages,
                                       in_flight, boxes, v.rows, cycles));
            } else {
              CHECK(cudaLaunchKernelEx(&config, ingress_rounds_kernel<false>, map, l2_pages,
                                       in_flight, boxes, v.rows, cycles));
            }
          },
          ctas, double(boxes) * v.rows * 128, boxes, cycles);
      std::printf("%-22s %9d %12.1f %12.1f %12.0f\n", v.name, in_flight, rate.bytes_per_sm_cycle,
                  rate.cycles_per_unit, rate.grid_gbs);
    }
  }

  // Several blocks per box, pipelined, every SM; the first line repeats the 8 KB box.
  std::printf("\nboxes of several 64-column blocks (one TMA instruction each), L2 pool, %d CTAs\n",
              sms);
  std::printf("%-8s %9s %12s %14s %12s\n", "blocks", "in flight", "B/cycle/SM", "cycles/8 KB",
              "grid GB/s");
  struct Shape {
    int blocks, in_flight;
  };
  for (const Shape& shape : {Shape{1, 18}, Shape{3, 6}, Shape{9, 1}, Shape{9, 2}}) {
    CUtensorMap map;
    if (!make_blocks_map(data, l2_pages, shape.blocks, &map)) continue;
    const int box_count = boxes / shape.blocks;
    const Rate rate = measure(
        [&] {
          ingress_blocks_kernel<<<sms, 32, kSmemBytes>>>(map, l2_pages, shape.in_flight,
                                                         shape.blocks, box_count, cycles);
        },
        sms, double(box_count) * shape.blocks * kBoxBytes, box_count * shape.blocks, cycles);
    std::printf("%-8d %9d %12.1f %14.1f %12.0f\n", shape.blocks, shape.in_flight,
                rate.bytes_per_sm_cycle, rate.cycles_per_unit, rate.grid_gbs);
  }

  // The same 8 KB boxes issued by 1, 2, 4 or 8 warps of a CTA (16 slots in all).
  std::printf("\n8 KB boxes issued by several warps of a CTA (16 in flight in all), L2 pool\n");
  std::printf("%-6s %5s %12s %12s %12s\n", "warps", "CTAs", "B/cycle/SM", "cycles/box",
              "grid GB/s");
  {
    const CUtensorMap map = make_map(data, l2_pages);
    for (int ctas : {1, sms}) {
      for (int warps : {1, 2, 4, 8}) {
        const Rate rate = measure(
            [&] {
              ingress_warps_kernel<<<ctas, 32 * warps, kSmemBytes>>>(map, l2_pages, boxes, cycles);
            },
            ctas, bytes, boxes, cycles);
        std::printf("%-6d %5d %12.1f %12.1f %12.0f\n", warps, ctas, rate.bytes_per_sm_cycle,
                    rate.cycles_per_unit, rate.grid_gbs);
      }
    }
  }

  // Bursts of 5, 9 or 18 boxes issued at once by one thread, by a warp's lanes or by as many
  // warps; each waited for whole before the next.
  std::printf("\nbursts of 8 KB boxes issued at once, each waited for whole, L2 pool\n");
  std::printf("%-6s %-8s %5s %12s %14s %12s\n", "boxes", "issuers", "CTAs", "B/cycle/SM",
              "cycles/burst", "grid GB/s");
  {
    const CUtensorMap map = make_map(data, l2_pages);
    const int bursts = 128;
    for (int ctas : {1, sms}) {
      for (int burst : {5, 9, 18}) {
        for (int mode : {0, 1, 2}) {
          const Rate rate = measure(
              [&] {
                ingress_burst_kernel<<<ctas, 32 * kMaxInFlight, kSmemBytes>>>(map, l2_pages, burst,
                                                                              bursts, mode, cycles);
              },
              ctas, double(bursts) * burst * kBoxBytes, bursts, cycles);
          std::printf("%-6d %-8s %5d %12.1f %14.1f %12.0f\n", burst,
                      mode == 0   ? "thread"
                      : mode == 1 ? "lanes"
                                  : "warps",
                      ctas, rate.bytes_per_sm_cycle, rate.cycles_per_unit, rate.grid_gbs);
        }
      }
    }
  }
  // Distributed shared memory between the CTAs of 2-CTA clusters (one cluster, then every SM).
  std::printf("\ndistributed shared memory, 2-CTA clusters: 32 KB a round each way per CTA\n");
  std::printf("%-22s %5s %12s %14s %12s\n", "mode", "CTAs", "B/cycle/SM", "cycles/round",
              "grid GB/s");
  {
    CHECK(cudaFuncSetAttribute(dsmem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmemBytes));
    const int rounds = 512;
    for (int ctas : {2, sms - sms % 2}) {
      for (int mode : {0, 1, 2}) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(ctas);
        config.blockDim = dim3(256);
        config.dynamicSmemBytes = kSmemBytes;
        cudaLaunchAttribute attribute = {};
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = 2;
        attribute.val.clusterDim.y = 1;
        attribute.val.clusterDim.z = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        const Rate rate =
            measure([&] { CHECK(cudaLaunchKernelEx(&config, dsmem_kernel, rounds, mode, cycles)); },
                    ctas, double(rounds) * 32 * 1024, rounds, cycles);
        std::printf("%-22s %5d %12.1f %14.1f %12.0f\n",
                    mode == 0   ? "remote stores"
                    : mode == 1 ? "stores + handshake"
                                : "bulk copy + handshake",
                    ctas, rate.bytes_per_sm_cycle, rate.cycles_per_unit, rate.grid_gbs);
      }
    }
  }
  CHECK(cudaFree(data));
  CHECK(cudaFree(cycles));
  return 0;
}
