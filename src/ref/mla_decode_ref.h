// CPU reference of the MLA decode op (the test oracle for kernels/mla_decode and the CPU
// backend's decode attention).
//
// Same semantics as mla::kernels::launch_mla_decode: q [b, s_q, h_q, d_qk]; paged cache
// [num_pages, page_size, h_kv, d_qk] whose first d_v columns are V; with causal, query i of a
// sequence of length L sees keys [0, L - s_q + i]; a row that sees no key gets out = 0 and
// lse = +inf. Scores, softmax and the weighted sum are accumulated in double; inputs are read as
// float (bf16 or fp32 storage). Only pages [0, ceil(L / page_size)) of a row of the block table
// are ever read, and within the last page only the first L mod page_size slots.
#pragma once

#include <cstdint>

namespace mla::ref {

template <typename T>
struct MlaDecodeInputs {
  int batch = 0;
  int seqlen_q = 1;
  int num_heads_q = 0;
  int num_heads_kv = 1;
  int head_dim_qk = 576;
  int head_dim_v = 512;
  int page_size = 64;
  int num_pages = 0;  // pages in the cache (block-table entries are checked against it)
  int max_pages_per_seq = 0;
  float softmax_scale = 0.f;
  bool causal = false;
  const T* q = nullptr;                  // [b, s_q, h_q, d_qk], contiguous
  const T* kv_cache = nullptr;           // [num_pages, page_size, h_kv, d_qk], contiguous
  const int32_t* block_table = nullptr;  // [b, max_pages_per_seq]
  const int32_t* seqlens = nullptr;      // [b]
};

// out: [b, s_q, h_q, d_v] fp32; lse: [b, h_q, s_q] fp32 (natural log).
template <typename T>
void mla_decode(const MlaDecodeInputs<T>& inputs, float* out, float* lse);

}  // namespace mla::ref
