// The MoE permutation plan and the weighted un-permute, on the device.
//
// Plan (one CTA): count the (token, k) pairs per expert, scan, write the row-tile table, then
// scatter the pairs into expert-sorted order *stably* (pair index order within an expert), chunk by
// chunk: a lane's rank among equal experts comes from __match_any_sync within its warp plus the
// counts of the same expert in the warps before it, so the order is deterministic (no atomics
// decide it) and equals ref::moe_permutation's. Un-permute: out[t] = Σ_k w[t,k] · y[pos[t,k]] in
// k order, fp32, then (+ out) and the store in out's type.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "moe/config.h"
#include "common/ptx.cuh"
#include "moe/kernel_args.h"
#include "common/launch.cuh"

namespace mla::kernels::moe {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__global__ void __launch_bounds__(kPlanThreads)
    moe_plan_kernel(const __grid_constant__ PlanArgs args) {
  __shared__ int32_t sCount[kMoeMaxExperts];
  __shared__ int32_t sNext[kMoeMaxExperts];  // the next free sorted row of each expert
  __shared__ int32_t sTileOffset[kMoeMaxExperts + 1];
  __shared__ int32_t sWarpHist[kPlanWarps][kMoeMaxExperts];  // a chunk's pairs per (warp, expert)
  __shared__ int32_t sWarpSums[kPlanWarps][2];

  // The gate/up grid launches as a programmatic dependent and waits for this grid's completion
  // anyway: let its CTAs get resident now.
  ptx::launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int num_experts = args.num_experts;
  const int64_t pairs = args.pairs;
  for (int i = tid; i < kPlanWarps * kMoeMaxExperts; i += kPlanThreads) (&sWarpHist[0][0])[i] = 0;
  if (tid < kMoeMaxExperts) sCount[tid] = 0;
  __syncthreads();
  for (int64_t i = tid; i < pairs; i += kPlanThreads) {
    const int32_t expert = args.expert_ids[i];
    if (expert >= 0 && expert < num_experts) atomicAdd(&sCount[expert], 1);
  }
  __syncthreads();

  // Exclusive scans of the row counts and the tile counts, one thread per expert.
  const int count = tid < num_experts ? sCount[tid] : 0;
  const int tiles = (count + kMoeRowsPerTile - 1) / kMoeRowsPerTile;
  int count_scan = count, tile_scan = tiles;  // inclusive within the warp
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int c = __shfl_up_sync(kFullMask, count_scan, offset);
    const int t = __shfl_up_sync(kFullMask, tile_scan, offset);
    if (lane >= offset) {
      count_scan += c;
      tile_scan += t;
    }
  }
  if (lane == 31) {
    sWarpSums[warp][0] = count_scan;
    sWarpSums[warp][1] = tile_scan;
  }
  __syncthreads();
  if (warp == 0) {
    int c = lane < kPlanWarps ? sWarpSums[lane][0] : 0;
    int t = lane < kPlanWarps ? sWarpSums[lane][1] : 0;
    const int c_own = c, t_own = t;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int c_up = __shfl_up_sync(kFullMask, c, offset);
      const int t_up = __shfl_up_sync(kFullMask, t, offset);
      if (lane >= offset) {
        c += c_up;
        t += t_up;
      }
    }
    __syncwarp();
    if (lane < kPlanWarps) {
      sWarpSums[lane][0] = c - c_own;  // now exclusive: the totals of the warps before
      sWarpSums[lane][1] = t - t_own;
    }
  }
  __syncthreads();
  if (tid < num_experts) {
    const int row_offset = sWarpSums[warp][0] + count_scan - count;
    const int tile_offset = sWarpSums[warp][1] + tile_scan - tiles;
    sNext[tid] = row_offset;
    sTileOffset[tid] = tile_offset;
    args.counts[tid] = count;
    args.offsets[tid] = row_offset;
    if (tid == num_experts - 1) {
      sTileOffset[num_experts] = tile_offset + tiles;
      args.offsets[num_experts] = row_offset + count;
    }
  }
  __syncthreads();

  // The tile table: slot → (expert, first row within the expert), or -1 past the last tile.
  const int total_tiles = sTileOffset[num_experts];
  for (int64_t slot = tid; slot < args.max_row_tiles; slot += kPlanThreads) {
    int32_t expert = -1, first_row = 0;
    if (slot < total_tiles) {
      int lo = 0, hi = num_experts - 1;  // the last expert whose tiles start at or before slot
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (sTileOffset[mid] <= slot)
          lo = mid;
        else
          hi = mid - 1;
      }
      expert = lo;
      first_row = static_cast<int32_t>(slot - sTileOffset[lo]) * kMoeRowsPerTile;
    }
    args.tiles[2 * slot] = expert;
    args.tiles[2 * slot + 1] = first_row;
  }

  // The stable scatter, kPlanThreads pairs at a time.
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t base = 0; base < pairs; base += kPlanThreads) {
    const int64_t i = base + tid;
    const int32_t id = i < pairs ? args.expert_ids[i] : -1;
    const bool valid = id >= 0 && id < num_experts;
    const int key = valid ? id : -1;
    const unsigned peers = __match_any_sync(kFullMask, key);
    const int rank = __popc(peers & lanes_below);
    const bool leader = (peers & lanes_below) == 0;
    if (valid && leader) sWarpHist[warp][id] = __popc(peers);
    __syncthreads();
    if (valid) {
      int row = sNext[id] + rank;
      for (int w = 0; w < warp; ++w) row += sWarpHist[w][id];
      args.order[row] = static_cast<int32_t>(i);
      args.position[i] = row;
    } else if (i < pairs) {
      args.position[i] = -1;
    }
    int chunk_count = 0;
    if (tid < num_experts)
      for (int w = 0; w < kPlanWarps; ++w) chunk_count += sWarpHist[w][tid];
    __syncthreads();
    if (tid < num_experts) sNext[tid] += chunk_count;
    if (valid && leader) sWarpHist[warp][id] = 0;
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kUnpermuteThreads)
    moe_unpermute_kernel(const __grid_constant__ UnpermuteArgs args) {
  __shared__ int32_t sPosition[kMoeMaxTopK];
  __shared__ float sWeight[kMoeMaxTopK];
  const int64_t token = blockIdx.x;
  const int top_k = args.top_k;
  // Launched as a programmatic dependent of the down GEMM: the plan and the routing weights are
  // complete already (L1 bypassed); the expert rows are not until the wait.
  if (threadIdx.x < top_k) {
    sPosition[threadIdx.x] = __ldcg(&args.position[token * top_k + threadIdx.x]);
    sWeight[threadIdx.x] = __ldcg(&args.expert_weights[token * top_k + threadIdx.x]);
  }
  ptx::wait_for_preceding_grid();
  __syncthreads();
  const int64_t hidden = args.hidden;
  for (int64_t col = int64_t(threadIdx.x) * 4; col < hidden; col += kUnpermuteThreads * 4) {
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < top_k; ++k) {
      const int32_t row = sPosition[k];
      if (row < 0) continue;  // a dropped pair (expert id out of range)
      const float w = sWeight[k];
      const float4 y =
          *reinterpret_cast<const float4*>(args.expert_out + int64_t(row) * hidden + col);
      sum.x += w * y.x;
      sum.y += w * y.y;
      sum.z += w * y.z;
      sum.w += w * y.w;
    }
    if (args.out_type == ScalarType::kF32) {
      float4* out = reinterpret_cast<float4*>(static_cast<float*>(args.out) +
                                              token * args.out_row_stride + col);
      if (args.accumulate) {
        const float4 old = *out;
        sum = make_float4(old.x + sum.x, old.y + sum.y, old.z + sum.z, old.w + sum.w);
      }
      *out = sum;
    } else {
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(
          static_cast<__nv_bfloat16*>(args.out) + token * args.out_row_stride + col);
      if (args.accumulate) {
        const float2 lo = __bfloat1622float2(out[0]), hi = __bfloat1622float2(out[1]);
        sum = make_float4(lo.x + sum.x, lo.y + sum.y, hi.x + sum.z, hi.y + sum.w);
      }
      out[0] = __floats2bfloat162_rn(sum.x, sum.y);
      out[1] = __floats2bfloat162_rn(sum.z, sum.w);
    }
  }
}

}  // namespace

void launch_plan_kernel(const PlanArgs& args, cudaStream_t stream) {
  moe_plan_kernel<<<1, kPlanThreads, 0, stream>>>(args);
  MLA_CHECK_LAUNCH("moe_plan");
}

void launch_unpermute_kernel(const UnpermuteArgs& args, cudaStream_t stream) {
  launch_programmatic_dependent(&moe_unpermute_kernel, dim3(static_cast<unsigned>(args.tokens)),
                                dim3(kUnpermuteThreads), 0, stream, args);
  MLA_CHECK_LAUNCH("moe_unpermute");
}

}  // namespace mla::kernels::moe
