// The MoE expert GEMMs: grouped over experts, problem sizes read from the device plan.
//
// CTA (blockIdx.x = row-tile slot, blockIdx.y = n tile) reads its (expert, first row) from the
// tile table and exits if the slot is unused, so the grid depends on the shape alone. Slots are
// the fast grid index: the CTAs running together share an n tile, and an expert with more than
// 32 rows re-reads that weight tile from L2 rather than from HBM. A and B are k-contiguous; a
// 4-stage cp.async ring feeds mma.sync m16n8k16 (bf16 → fp32) through ldmatrix. Shared rows are
// 128 bytes with 16-byte chunk c of row r stored at c ^ (r & 7): conflict-free for the cp.async
// writes and for ldmatrix's 8-row reads. Rows past the expert's count and k past the end are
// zero-filled by cp.async (src-size 0) and never stored.
//   gate/up: A = x rows gathered by token (order[row] / top_k); the 64 B rows are 32 gate rows and
//            the same 32 up rows, so each thread holds gate and up of the same outputs and writes
//            silu(gate) · up as bf16.
//   down:    A = activation rows (sorted); B = 64 down_proj rows; writes fp32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/ptx.cuh"
#include "cuda/check.h"
#include "moe/config.h"
#include "moe/kernel_args.h"
#include "common/launch.cuh"

namespace mla::kernels::moe {
namespace {

__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * kGemmK + ((chunk ^ (row & 7)) << 3));  // in elements
}

template <bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads)
    moe_gemm_kernel(const __grid_constant__ GemmArgs args) {
  // Programmatic dependent launch. gate/up needs the plan (the grid just before it) for
  // everything, so it waits first. down needs the previous grid (gate/up) only for its A operand:
  // the plan (complete before gate/up passed its own wait, so before down could launch) and the
  // weights are read before the wait, L1 bypassed, and the weight stages start streaming while
  // gate/up is still running.
  if constexpr (kGateUp) {
    ptx::wait_for_preceding_grid();
    ptx::launch_dependents();
  }
  const int32_t expert = __ldcg(&args.tiles[2 * blockIdx.x]);
  if (expert < 0) return;  // an unused tile slot
  const int first_row = __ldcg(&args.tiles[2 * blockIdx.x + 1]);
  const int rows = min(kGemmRows, __ldcg(&args.counts[expert]) - first_row);
  const int64_t sorted_row0 = int64_t(__ldcg(&args.offsets[expert])) + first_row;
  const int64_t n = args.n, k = args.k;
  const int n_tile_columns = kGateUp ? kGateUpColumns : kDownColumns;
  const int64_t n0 = int64_t(blockIdx.y) * n_tile_columns;

  // The cp.async ring: stage s holds A rows [kGemmRows][kGemmK] then B rows [kGemmBRows][kGemmK].
  extern __shared__ __align__(128) uint8_t smem[];
  const auto sA = [&](int stage) {
    return reinterpret_cast<__nv_bfloat16*>(smem + stage * kGemmStageBytes);
  };
  const auto sB = [&](int stage) { return sA(stage) + kGemmRows * kGemmK; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // This thread's copies: chunk tid & 7 of A rows r, r + 16 and of B rows r + 16 j.
  const int load_chunk = tid & 7, load_row = tid >> 3;
  const __nv_bfloat16* a_base = reinterpret_cast<const __nv_bfloat16*>(args.a);
  const __nv_bfloat16* gA[2];
  bool a_ok[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int row = load_row + 16 * j;
    a_ok[j] = row < rows;
    int64_t source_row = 0;
    if (a_ok[j]) {
      const int32_t sorted = static_cast<int32_t>(sorted_row0 + row);
      source_row = kGateUp ? __ldcg(&args.order[sorted]) / args.top_k : sorted;
    }
    gA[j] = a_base + source_row * args.a_row_stride;
  }
  const __nv_bfloat16* b0 = reinterpret_cast<const __nv_bfloat16*>(args.b0[expert]);
  const __nv_bfloat16* b1 =
      kGateUp ? reinterpret_cast<const __nv_bfloat16*>(args.b1[expert]) : nullptr;
  const __nv_bfloat16* gB[4];
  bool b_ok[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int tile_row = load_row + 16 * j;
    int64_t weight_row;
    const __nv_bfloat16* matrix;
    if (kGateUp) {
      matrix = tile_row < kGateUpColumns ? b0 : b1;
      weight_row = n0 + (tile_row % kGateUpColumns);
    } else {
      matrix = b0;
      weight_row = n0 + tile_row;
    }
    b_ok[j] = weight_row < n;
    gB[j] = matrix + (b_ok[j] ? weight_row : 0) * k;
  }

  const int num_k_tiles = static_cast<int>((k + kGemmK - 1) / kGemmK);
  const auto load_a = [&](int stage, int k_tile) {
    const int64_t kk = int64_t(k_tile) * kGemmK + load_chunk * 8;
    const bool k_ok = kk < k;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const bool ok = a_ok[j] && k_ok;
      ptx::cp_async_16(
          ptx::smem_address(&sA(stage)[swizzled_offset(load_row + 16 * j, load_chunk)]),
          ok ? gA[j] + kk : a_base, ok ? 16 : 0);
    }
  };
  const auto load_b = [&](int stage, int k_tile) {
    const int64_t kk = int64_t(k_tile) * kGemmK + load_chunk * 8;
    const bool k_ok = kk < k;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool ok = b_ok[j] && k_ok;
      ptx::cp_async_16(
          ptx::smem_address(&sB(stage)[swizzled_offset(load_row + 16 * j, load_chunk)]),
          ok ? gB[j] + kk : b0, ok ? 16 : 0);
    }
  };

  // rAcc[m half][n8 tile][4]: gate/up: n8 tile 0 = gate, 1 = up (the same output columns).
  float rAcc[2][2][4] = {};
  const bool second_half = rows > 16;  // warp-uniform: skip the empty m16 half (decode)
  const int q = lane >> 3;             // which 8×8 matrix this lane addresses in ldmatrix.x4
  const int b_row =
      (kGateUp ? (q >> 1) * kGateUpColumns + 8 * warp : 16 * warp + (q >> 1) * 8) + (lane & 7);

  // Prologue. gate/up: groups (A+B)_0 .. (A+B)_{S-2}. down: B_0 .. B_{S-2} before the wait, then
  // A_0 .. A_{S-2}. Either way the group holding stage k's last part is the (S-1+k)-th from the
  // first, so waiting until at most S-2 groups are pending at iteration k has stage k landed.
  if constexpr (kGateUp) {
#pragma unroll
    for (int stage = 0; stage < kGemmStages - 1; ++stage) {
      if (stage < num_k_tiles) {
        load_a(stage, stage);
        load_b(stage, stage);
      }
      ptx::cp_async_commit();
    }
  } else {
#pragma unroll
    for (int stage = 0; stage < kGemmStages - 1; ++stage) {
      if (stage < num_k_tiles) load_b(stage, stage);
      ptx::cp_async_commit();
    }
    ptx::wait_for_preceding_grid();  // the activation rows are gate/up's output
    ptx::launch_dependents();
#pragma unroll
    for (int stage = 0; stage < kGemmStages - 1; ++stage) {
      if (stage < num_k_tiles) load_a(stage, stage);
      ptx::cp_async_commit();
    }
  }
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    ptx::cp_async_wait_group<kGemmStages - 2>();
    __syncthreads();  // stage k_tile has landed for all; stage k_tile - 1 is free
    const int next = k_tile + kGemmStages - 1;
    if (next < num_k_tiles) {
      load_a(next % kGemmStages, next);
      load_b(next % kGemmStages, next);
    }
    ptx::cp_async_commit();

    const int stage = k_tile % kGemmStages;
#pragma unroll
    for (int k16 = 0; k16 < kGemmK / 16; ++k16) {
      uint32_t rA[2][4], rB[4];
      ptx::ldmatrix_x4(
          rA[0], ptx::smem_address(&sA(stage)[swizzled_offset(lane & 15, 2 * k16 + (lane >> 4))]));
      if (second_half)
        ptx::ldmatrix_x4(rA[1],
                         ptx::smem_address(
                             &sA(stage)[swizzled_offset(16 + (lane & 15), 2 * k16 + (lane >> 4))]));
      ptx::ldmatrix_x4(rB,
                       ptx::smem_address(&sB(stage)[swizzled_offset(b_row, 2 * k16 + (q & 1))]));
      ptx::mma_bf16_16816(rAcc[0][0], rA[0], rB[0], rB[1]);
      ptx::mma_bf16_16816(rAcc[0][1], rA[0], rB[2], rB[3]);
      if (second_half) {
        ptx::mma_bf16_16816(rAcc[1][0], rA[1], rB[0], rB[1]);
        ptx::mma_bf16_16816(rAcc[1][1], rA[1], rB[2], rB[3]);
      }
    }
  }
  ptx::cp_async_wait_all();

  // Accumulator (m half h, n8 tile t): c[0..1] at row g, c[2..3] at row g + 8; columns 2 (lane %
  // 4).
  const int g = lane >> 2, column_pair = 2 * (lane & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = half * 16 + g + 8 * r;
      if (row >= rows) continue;
      const int64_t sorted = sorted_row0 + row;
      if (kGateUp) {
        const int64_t column = n0 + 8 * warp + column_pair;
        if (column >= n) continue;  // n is a multiple of 8: column + 1 < n too
        const float gate0 = rAcc[half][0][2 * r], gate1 = rAcc[half][0][2 * r + 1];
        const float act0 = gate0 / (1.f + expf(-gate0)) * rAcc[half][1][2 * r];
        const float act1 = gate1 / (1.f + expf(-gate1)) * rAcc[half][1][2 * r + 1];
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(args.c) + sorted * n +
                                           column) = __floats2bfloat162_rn(act0, act1);
      } else {
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const int64_t column = n0 + 16 * warp + 8 * t + column_pair;
          if (column >= n) continue;
          *reinterpret_cast<float2*>(static_cast<float*>(args.c) + sorted * n + column) =
              make_float2(rAcc[half][t][2 * r], rAcc[half][t][2 * r + 1]);
        }
      }
    }
  }
}

void launch_gemm(const GemmArgs& args, bool gate_up, cudaStream_t stream) {
  const int columns = gate_up ? kGateUpColumns : kDownColumns;
  auto* kernel = gate_up ? &moe_gemm_kernel<true> : &moe_gemm_kernel<false>;
  // The opt-in shared memory limit is a per-function attribute, legal during stream capture.
  MLA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kGemmSmemBytes));
  launch_programmatic_dependent(kernel,
                                dim3(static_cast<unsigned>(args.max_row_tiles),
                                     static_cast<unsigned>((args.n + columns - 1) / columns)),
                                dim3(kGemmThreads), kGemmSmemBytes, stream, args);
}

}  // namespace

void launch_gate_up_kernel(const GemmArgs& args, cudaStream_t stream) {
  launch_gemm(args, true, stream);
  MLA_CHECK_LAUNCH("moe_gate_up_gemm");
}

void launch_down_kernel(const GemmArgs& args, cudaStream_t stream) {
  launch_gemm(args, false, stream);
  MLA_CHECK_LAUNCH("moe_down_gemm");
}

}  // namespace mla::kernels::moe
