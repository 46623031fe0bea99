// Thin wrappers over the PTX instructions the sm_80+/sm_90 kernels use: cp.async, ldmatrix,
// mma.sync (bf16 → fp32), and fast exp2. Each wrapper is one instruction; no policy lives here.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace mla::kernels::ptx {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16-byte asynchronous global → shared copy. src_bytes = 0 zero-fills the destination without
// reading global memory (the source address must still be a valid pointer value).
__device__ __forceinline__ void cp_async_16(uint32_t dst_smem, const void* src_global,
                                            int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src_global),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Waits until at most kPending of this thread's most recent cp.async groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Programmatic dependent launch: let the next kernel in the stream start launching now; it still
// waits (griddepcontrol.wait) for this grid's completion before reading what this grid wrote.
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// In a kernel launched with programmatic stream serialization: wait for the preceding grid.
__device__ __forceinline__ void wait_for_preceding_grid() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// The GPU's global nanosecond timer (the same clock on every SM; for diagnostics).
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns));
  return ns;
}

// The SM this thread runs on (%smid; for diagnostics).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

// A 32-bit load with acquire semantics at GPU scope (a flag another CTA releases).
__device__ __forceinline__ int load_acquire_gpu(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// atomicAdd with acquire-release semantics at GPU scope: the release orders this thread's earlier
// writes (and, through a CTA barrier before it, its CTA's) before the add; the acquire orders
// the writes released by earlier adds on the same counter before what follows. No SC fence (a
// __threadfence() is MEMBAR.SC.GPU). Returns the old value.
__device__ __forceinline__ int atomic_add_acq_rel_gpu(int* address, int value) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(address), "r"(value)
               : "memory");
  return old;
}

// Four 8×8 b16 matrices; lane l supplies the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(address));
}

// As ldmatrix_x4, each matrix transposed on the way (rows of smem become columns of the fragment).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// D[16×8] += A[16×16] · B[16×8], bf16 inputs, fp32 accumulators (the standard fragment layouts).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stores `value` at `address` when `predicate` holds: one predicated instruction, no branch (so a
// diagnostic store does not split a wgmma pipeline stage into divergent paths).
__device__ __forceinline__ void st_global_u64_if(bool predicate, uint64_t* address,
                                                 uint64_t value) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p st.global.u64 [%1], %2;\n}\n" ::"r"(
                   static_cast<int>(predicate)),
               "l"(address), "l"(value)
               : "memory");
}

// A 32-bit store to shared memory (address from smem_address) when `predicate` holds; no branch.
__device__ __forceinline__ void st_shared_u32_if(bool predicate, uint32_t address, uint32_t value) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p st.shared.u32 [%1], %2;\n}\n" ::"r"(
                   static_cast<int>(predicate)),
               "r"(address), "r"(value)
               : "memory");
}

// clock64 meant to be read only once a shared load of `smem_word` has returned (the read is
// predicated on the loaded value, any value other than 0xffffffff). A diagnostic stamp right
// after bar.sync needs that: a plain clock read there was seen to return the warp's ARRIVAL at the
// barrier (in SASS the barrier is BAR.SYNC.DEFER_BLOCKING, and the read ran ahead of the other
// warpgroup's stamp from before its own arrival, by up to ~1,000 cycles), while the load cannot
// complete before the barrier releases the warp. Caveat: ptxas turns the predicated read into an
// unconditional CS2R and a SEL, so the order rests on its schedule (LDS, then the ISETP that
// waits for it, then CS2R), which held for all 25 stamps of the pair trace's SASS at d12d148 and
// for all 35 at 6dc08c4 (every stamp after a BAR.SYNC has its LDS and ISETP between the barrier
// and the CS2R); re-check it there after a change (cuobjdump -sass).
__device__ __forceinline__ uint64_t clock64_after_shared_load(uint32_t smem_word) {
  uint64_t clock = 0;
  asm volatile(
      "{\n.reg .u32 v;\n.reg .pred p;\nld.volatile.shared.u32 v, [%1];\n"
      "setp.ne.u32 p, v, 0xffffffff;\n@p mov.u64 %0, %%clock64;\n}\n"
      : "+l"(clock)
      : "r"(smem_word)
      : "memory");
  return clock;
}

// Two floats → packed bf16x2 (round to nearest even), low half = `lo`.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 packed = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&packed);
}

// 2^x with the special-function unit (exp2(-inf) = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace mla::kernels::ptx
