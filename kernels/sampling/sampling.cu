// Device side of mla/kernels/sampling.h: one 1024-thread CTA per row.
//
// The row is copied to the workspace with the penalties applied (context counts through global
// atomics, one atomicExch per token both deduplicates and clears them), then every selection is a
// radix select over the unique 64-bit keys of sampling_math.h (value, then id): 8-bit digits from
// the top, a 256-bin histogram of counts (top-k, top-n logprobs) or of fixed-point probability
// mass (top-p) per pass, stopping as soon as the chosen bin holds one key. Ties need no special
// case: the id bits below the value make every key distinct, larger for the lower id. All sums
// are uint64, so the result does not depend on the order in which threads add.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/check.h"
#include "mla/kernels/sampling.h"
#include "sampling/sampling_layout.h"

namespace mla::kernels {
namespace {

constexpr int kWarps = kSamplingThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr uint32_t kSeenBit = 0x80000000u;
constexpr int kUnroll = 4;  // elements per thread per round of a pass: loads in flight
// Radix digits per warp summed in registers before the atomics: 4 when they carry probability mass
// (u64 atomics on shared conflicts are costly), 1 for counts (measured faster on the H200).
constexpr int kGroupedDigitsWeighted = 4;
constexpr int kGroupedDigitsCounts = 1;
static_assert(kWarps <= 32, "the block scan's second level is one warp over all warps");

using u64 = unsigned long long;

struct SharedStorage {
  u64 bin_weight[kSamplingRadixBins];
  unsigned int bin_count[kSamplingRadixBins];
  u64 warp_u64[kWarps];
  float warp_max[kWarps];
  float warp_sum[kWarps];
  u64 broadcast_u64[2];
  int select_digit;
  unsigned int select_count;
  long long chosen;
  int top_count;
  unsigned int list_length;
  u64 top_keys[kSamplingMaxLogprobs];
};

__device__ __forceinline__ u64 warp_sum(u64 v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ u64 warp_max(u64 v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const u64 other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

template <bool kMax>
__device__ u64 block_reduce(u64 v, SharedStorage& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) s.warp_u64[warp] = v;
  __syncthreads();
  if (warp == 0) {
    u64 x = lane < kWarps ? s.warp_u64[lane] : 0;
    x = kMax ? warp_max(x) : warp_sum(x);
    if (lane == 0) s.broadcast_u64[0] = x;
  }
  __syncthreads();
  const u64 result = s.broadcast_u64[0];
  __syncthreads();
  return result;
}

// Exclusive prefix sum over threads in threadIdx order; `total` gets the block's sum.
__device__ u64 block_exclusive_scan(u64 v, u64& total, SharedStorage& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  u64 inclusive = v;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const u64 up = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) s.warp_u64[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const u64 x = lane < kWarps ? s.warp_u64[lane] : 0;
    u64 warp_inclusive = x;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const u64 up = __shfl_up_sync(kFullMask, warp_inclusive, offset);
      if (lane >= offset) warp_inclusive += up;
    }
    if (lane < kWarps) s.warp_u64[lane] = warp_inclusive - x;
    if (lane == 31) s.broadcast_u64[0] = warp_inclusive;
  }
  __syncthreads();
  const u64 exclusive = s.warp_u64[warp] + inclusive - v;
  total = s.broadcast_u64[0];
  __syncthreads();
  return exclusive;
}

// One pass over values[0, vocab): use(i, value, valid) is called warp-uniformly (valid false for
// the lanes past the end), so it may hold warp collectives. A single CTA reads the row, so the pass
// is bound by loads in flight: each thread keeps kUnroll float4 (16-byte aligned rows) or
// 4·kUnroll scalars (other rows) in flight per round.
template <typename Use>
__device__ __forceinline__ void row_pass(const float* values, int64_t vocab, Use use) {
  constexpr int kScalars = 4 * kUnroll;
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(values) & 15) == 0) {
    const float4* values4 = reinterpret_cast<const float4*>(values);
    const int64_t vectors = vocab / 4;
    for (int64_t base = 0; base < vectors; base += kSamplingThreads * kUnroll) {
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = base + u * kSamplingThreads + threadIdx.x;
        x[u] = j < vectors ? values4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = base + u * kSamplingThreads + threadIdx.x;
        const bool valid = j < vectors;
        use(4 * j, x[u].x, valid);
        use(4 * j + 1, x[u].y, valid);
        use(4 * j + 2, x[u].z, valid);
        use(4 * j + 3, x[u].w, valid);
      }
    }
    done = 4 * vectors;
  }
  for (int64_t base = done; base < vocab; base += kSamplingThreads * kScalars) {
    float x[kScalars];
#pragma unroll
    for (int u = 0; u < kScalars; ++u) {
      const int64_t i = base + u * kSamplingThreads + threadIdx.x;
      x[u] = i < vocab ? values[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kScalars; ++u) {
      const int64_t i = base + u * kSamplingThreads + threadIdx.x;
      use(i, x[u], i < vocab);
    }
  }
}

// Running max and sum of e^(x - max) (online softmax), for the raw logits' log-normaliser.
struct MaxSum {
  float max;
  float sum;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
__device__ MaxSum block_reduce(MaxSum v, SharedStorage& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = combine(
        v, {__shfl_xor_sync(kFullMask, v.max, offset), __shfl_xor_sync(kFullMask, v.sum, offset)});
  if (lane == 0) {
    s.warp_max[warp] = v.max;
    s.warp_sum[warp] = v.sum;
  }
  __syncthreads();
  MaxSum x = lane < kWarps ? MaxSum{s.warp_max[lane], s.warp_sum[lane]} : MaxSum{-INFINITY, 0.0f};
  for (int offset = 16; offset > 0; offset >>= 1)
    x = combine(
        x, {__shfl_xor_sync(kFullMask, x.max, offset), __shfl_xor_sync(kFullMask, x.sum, offset)});
  __syncthreads();
  return x;  // every warp reduced the same 32 partials in the same order
}

// Among the candidates (ids whose key = sampling_key(values[id], id) has is_candidate(key)), the
// one whose key K has W(keys > K) <= target < W(keys >= K), where W sums weight_of(key)
// (kWeighted) or counts candidates. The caller guarantees target < W(all candidates); keys are
// distinct. The first pass reads the whole row; the ids in its chosen bin are then listed in
// g_list ([vocab] uint32, scratch) in any order, and the later passes read only those.
template <bool kWeighted, typename IsCandidate, typename WeightOf>
__device__ u64 radix_select(const float* values, int64_t vocab, int id_bits, int digits,
                            IsCandidate is_candidate, WeightOf weight_of, u64 target,
                            uint32_t* g_list, SharedStorage& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  u64 prefix = 0;          // the digits chosen so far
  int64_t length = vocab;  // ids to read: 0..vocab-1, then g_list[0..length)
  bool listed = false;
  // Calls visit(id, key, candidate) warp-uniformly for every id to read.
  auto for_each = [&](auto visit) {
    if (!listed) {
      row_pass(values, vocab, [&](int64_t i, float value, bool valid) {
        const u64 key = sampling_key(value, i, id_bits, vocab);
        visit(i, key, valid && is_candidate(key));
      });
      return;
    }
    for (int64_t base = 0; base < length; base += kSamplingThreads * kUnroll) {
      int64_t ids[kUnroll];
      float x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t n = base + u * kSamplingThreads + threadIdx.x;
        ids[u] = n < length ? int64_t(g_list[n]) : -1;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = ids[u] >= 0 ? values[ids[u]] : 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const u64 key = ids[u] >= 0 ? sampling_key(x[u], ids[u], id_bits, vocab) : 0;
        visit(ids[u], key, ids[u] >= 0 && is_candidate(key));
      }
    }
  };
  for (int d = 0; d < digits; ++d) {
    const int shift = 64 - kSamplingRadixBits * (d + 1);
    for (int b = threadIdx.x; b < kSamplingRadixBins; b += kSamplingThreads) {
      s.bin_count[b] = 0;
      s.bin_weight[b] = 0;
    }
    __syncthreads();
    for_each([&](int64_t, u64 key, bool candidate) {
      const bool in_bin = candidate && (d == 0 || (key >> (shift + kSamplingRadixBits)) == prefix);
      const int digit = in_bin ? int((key >> shift) & (kSamplingRadixBins - 1)) : -1;
      // Rows share their top digits (sign and exponent) and may hold many exact ties, so one
      // digit can be in most lanes: the first few digits of the warp are summed in registers
      // (one atomic per digit), the rest (many distinct digits: few conflicts) add directly.
      const u64 weight = kWeighted && digit >= 0 ? weight_of(key) : 0;
      unsigned pending = __ballot_sync(kFullMask, digit >= 0);
      constexpr int kRounds = kWeighted ? kGroupedDigitsWeighted : kGroupedDigitsCounts;
      for (int round = 0; round < kRounds && pending != 0; ++round) {
        const int leader = __ffs(pending) - 1;
        const int group_digit = __shfl_sync(kFullMask, digit, leader);
        const bool mine = digit == group_digit;
        const unsigned group = __ballot_sync(kFullMask, mine);
        u64 sum = 0;
        if constexpr (kWeighted) sum = warp_sum(mine ? weight : 0);
        if (lane == leader) {
          atomicAdd(&s.bin_count[group_digit], unsigned(__popc(group)));
          if constexpr (kWeighted) atomicAdd(&s.bin_weight[group_digit], sum);
        }
        pending &= ~group;
      }
      if (pending & (1u << lane)) {
        atomicAdd(&s.bin_count[digit], 1u);
        if constexpr (kWeighted)
          if (weight != 0) atomicAdd(&s.bin_weight[digit], weight);
      }
    });
    __syncthreads();
    if (warp == 0) {
      // Lane l scans bins 255 - 8l down to 248 - 8l: larger keys first.
      auto bin_total = [&](int b) -> u64 { return kWeighted ? s.bin_weight[b] : s.bin_count[b]; };
      u64 lane_total = 0;
      for (int j = 0; j < 8; ++j) lane_total += bin_total(kSamplingRadixBins - 1 - 8 * lane - j);
      u64 inclusive = lane_total;
      for (int offset = 1; offset < 32; offset <<= 1) {
        const u64 up = __shfl_up_sync(kFullMask, inclusive, offset);
        if (lane >= offset) inclusive += up;
      }
      u64 before = inclusive - lane_total;
      if (before <= target && target < inclusive) {
        for (int j = 0; j < 8; ++j) {
          const int b = kSamplingRadixBins - 1 - 8 * lane - j;
          if (target < before + bin_total(b)) {
            s.select_digit = b;
            s.select_count = s.bin_count[b];
            s.broadcast_u64[1] = target - before;
            break;
          }
          before += bin_total(b);
        }
      }
      if (lane == 0) s.list_length = 0;
    }
    __syncthreads();
    prefix = (prefix << kSamplingRadixBits) | u64(s.select_digit);
    target = s.broadcast_u64[1];
    const unsigned count = s.select_count;
    __syncthreads();
    const bool last = count == 1 || d + 1 == digits;
    if (!last && listed) continue;
    // After the first pass: list the ids in the chosen bin. When one key is left: find it.
    for_each([&](int64_t id, u64 key, bool candidate) {
      const bool match = candidate && (key >> shift) == prefix;
      if (last) {
        if (match) s.broadcast_u64[1] = key;
        return;
      }
      const unsigned matches = __ballot_sync(kFullMask, match);
      if (matches == 0) return;
      const int leader = __ffs(matches) - 1;
      unsigned first = 0;
      if (lane == leader) first = atomicAdd(&s.list_length, unsigned(__popc(matches)));
      first = __shfl_sync(kFullMask, first, leader);
      if (match) g_list[first + __popc(matches & ((1u << lane) - 1))] = uint32_t(id);
    });
    __syncthreads();
    if (last) {
      const u64 key =
          count == 1 ? s.broadcast_u64[1] : prefix << (64 - kSamplingRadixBits * digits);
      __syncthreads();
      return key;
    }
    length = s.list_length;
    listed = true;
    __syncthreads();
  }
  return 0;  // not reached: the last digit returns
}

__global__ void __launch_bounds__(kSamplingThreads)
    sampling_kernel(const __grid_constant__ SamplingParams p) {
  __shared__ SharedStorage s;
  const int64_t row = blockIdx.x;
  const int64_t vocab = p.vocab;
  const SamplingRowParams rp = p.row_params[row];
  const float* g_logits = p.logits + row * p.logits_row_stride;  // [vocab]
  char* slab = static_cast<char*>(p.workspace) + row * sampling_row_workspace_bytes(vocab);
  float* g_work = reinterpret_cast<float*>(slab);                    // [vocab] penalised logits
  uint32_t* g_counts = reinterpret_cast<uint32_t*>(g_work + vocab);  // [vocab] context counts
  const int id_bits = sampling_id_bits(vocab);
  const int digits = sampling_key_digits(id_bits);

  // 1. The penalised copy.
  const int64_t context_begin = p.context_offsets[row];
  const int64_t context_length = max(int64_t(0), p.context_offsets[row + 1] - context_begin);
  const int64_t prompt_length =
      min(context_length, max(int64_t(0), int64_t(p.prompt_lengths[row])));
  const bool penalise = p.context_tokens != nullptr && context_length > 0 &&
                        (rp.repetition_penalty != 1.0f || rp.presence_penalty != 0.0f ||
                         rp.frequency_penalty != 0.0f);
  row_pass(g_logits, vocab, [&](int64_t i, float x, bool valid) {
    if (!valid) return;
    g_work[i] = x;
    if (penalise) g_counts[i] = 0;
  });
  if (penalise) {
    const int32_t* g_context = p.context_tokens + context_begin;  // [context_length]
    __syncthreads();
    for (int64_t j = threadIdx.x; j < context_length; j += kSamplingThreads) {
      const int32_t id = g_context[j];
      if (id < 0 || id >= vocab) continue;
      atomicOr(&g_counts[id], kSeenBit);
      if (j >= prompt_length) atomicAdd(&g_counts[id], 1u);
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < context_length; j += kSamplingThreads) {
      const int32_t id = g_context[j];
      if (id < 0 || id >= vocab) continue;
      const uint32_t counts = atomicExch(&g_counts[id], 0u);  // the first visit of id applies it
      if (counts != 0) g_work[id] = sampling_penalise(g_work[id], true, counts & ~kSeenBit, rp);
    }
  }
  __syncthreads();

  // 2. The first maximum; greedy stops here.
  u64 best = 0;
  row_pass(g_work, vocab, [&](int64_t i, float x, bool valid) {
    const u64 key = sampling_key(x, i, id_bits, vocab);
    if (valid && key > best) best = key;
  });
  best = block_reduce<true>(best, s);
  int64_t chosen = sampling_key_id(best, id_bits, vocab);
  const float max_logit = g_work[chosen];

  if (rp.temperature != 0.0f && isfinite(max_logit)) {
    const float temperature = rp.temperature;
    auto weight_of = [&](u64 key) -> u64 {
      return sampling_fixed_point(
          sampling_probability(sampling_key_value(key), max_logit, temperature));
    };
    // 3. Top-k, then top-p: each moves the cut (tokens with key >= cut stay).
    u64 cut = 0;
    if (rp.top_k > 0 && rp.top_k < vocab) {
      cut = radix_select<false>(
          g_work, vocab, id_bits, digits, [](u64) { return true; }, weight_of, u64(rp.top_k - 1),
          g_counts, s);
    }
    if (rp.top_p < 1.0f) {
      const u64 cut_k = cut;
      u64 local = 0;
      row_pass(g_work, vocab, [&](int64_t i, float x, bool valid) {
        const u64 key = sampling_key(x, i, id_bits, vocab);
        if (valid && key >= cut_k) local += weight_of(key);
      });
      const u64 total = block_reduce<false>(local, s);
      const u64 need = sampling_top_p_need(rp.top_p, total);
      cut = radix_select<true>(
          g_work, vocab, id_bits, digits, [&](u64 key) { return key >= cut_k; }, weight_of,
          need - 1, g_counts, s);
    }
    // 4. Min-p and the draw: the kept mass in id order, each thread a contiguous chunk of ids.
    auto kept_weight = [&](int64_t i, float value) -> u64 {
      if (sampling_key(value, i, id_bits, vocab) < cut) return 0;
      const float probability = sampling_probability(value, max_logit, temperature);
      if (rp.min_p > 0.0f && !(probability >= rp.min_p)) return 0;
      return sampling_fixed_point(probability);
    };
    // Chunks of a multiple of 4 ids: g_work is 256-byte aligned, so each chunk reads float4s.
    const int64_t chunk = (vocab + 4 * kSamplingThreads - 1) / (4 * kSamplingThreads) * 4;
    const int64_t chunk_begin = min(vocab, int64_t(threadIdx.x) * chunk);
    const int64_t chunk_end = min(vocab, chunk_begin + chunk);
    auto chunk_pass = [&](auto use) {  // use(i, kept weight) in id order; false stops
      int64_t i = chunk_begin;
      for (; i + 4 <= chunk_end; i += 4) {
        const float4 x = *reinterpret_cast<const float4*>(g_work + i);
        if (!use(i, kept_weight(i, x.x)) || !use(i + 1, kept_weight(i + 1, x.y)) ||
            !use(i + 2, kept_weight(i + 2, x.z)) || !use(i + 3, kept_weight(i + 3, x.w)))
          return;
      }
      for (; i < chunk_end; ++i)
        if (!use(i, kept_weight(i, g_work[i]))) return;
    };
    u64 local = 0;
    chunk_pass([&](int64_t, u64 weight) {
      local += weight;
      return true;
    });
    if (threadIdx.x == 0) s.chosen = chosen;  // (never kept: the first maximum always is)
    u64 total = 0;
    const u64 before = block_exclusive_scan(local, total, s);
    const u64 r = sampling_scale_random(sampling_uniform64(rp.seed, rp.step), total);
    if (before <= r && r < before + local) {
      u64 mass = before;
      chunk_pass([&](int64_t i, u64 weight) {
        mass += weight;
        if (r < mass) {
          s.chosen = i;
          return false;
        }
        return true;
      });
    }
    __syncthreads();
    chosen = s.chosen;
  }
  if (threadIdx.x == 0) p.out_tokens[row] = int32_t(chosen);

  // 5. Log-probabilities of the raw logits.
  if (rp.num_logprobs < 0 || (p.out_logprob == nullptr && p.out_top_ids == nullptr)) return;
  MaxSum partial{-INFINITY, 0.0f};
  row_pass(g_logits, vocab, [&](int64_t, float x, bool valid) {
    if (!valid) return;
    if (!(x > partial.max)) {
      if (x > -INFINITY) partial.sum += expf(x - partial.max);
    } else {
      partial.sum = partial.sum * expf(partial.max - x) + 1.0f;
      partial.max = x;
    }
  });
  const MaxSum all = block_reduce(partial, s);
  const float log_total = all.max + logf(all.sum);
  if (threadIdx.x == 0 && p.out_logprob != nullptr)
    p.out_logprob[row] = g_logits[chosen] - log_total;
  if (p.out_top_ids == nullptr) return;
  const int top = int(min(int64_t(min(rp.num_logprobs, kSamplingMaxLogprobs)), vocab));
  int32_t* g_top_ids = p.out_top_ids + row * kSamplingMaxLogprobs;          // [20]
  float* g_top_logprobs = p.out_top_logprobs + row * kSamplingMaxLogprobs;  // [20]
  if (top > 0) {
    const u64 cut = radix_select<false>(
        g_logits, vocab, id_bits, digits, [](u64) { return true; }, [](u64) { return u64(0); },
        u64(top - 1), g_counts, s);
    if (threadIdx.x == 0) s.top_count = 0;
    __syncthreads();
    row_pass(g_logits, vocab, [&](int64_t i, float x, bool valid) {
      const u64 key = sampling_key(x, i, id_bits, vocab);
      if (valid && key >= cut) s.top_keys[atomicAdd(&s.top_count, 1)] = key;
    });
    __syncthreads();
    if (threadIdx.x < top) {  // exactly `top` keys, distinct: a rank is a count of larger ones
      const u64 key = s.top_keys[threadIdx.x];
      int rank = 0;
      for (int j = 0; j < top; ++j) rank += s.top_keys[j] > key;
      const int64_t id = sampling_key_id(key, id_bits, vocab);
      g_top_ids[rank] = int32_t(id);
      g_top_logprobs[rank] = g_logits[id] - log_total;
    }
  }
  if (threadIdx.x >= top && threadIdx.x < kSamplingMaxLogprobs) {
    g_top_ids[threadIdx.x] = -1;
    g_top_logprobs[threadIdx.x] = -INFINITY;
  }
}

}  // namespace

void launch_sampling(const SamplingParams& params, cudaStream_t stream) {
  check_sampling_params(params);
  if (params.rows == 0) return;
  sampling_kernel<<<unsigned(params.rows), kSamplingThreads, 0, stream>>>(params);
  MLA_CHECK_LAUNCH("sampling");
}

}  // namespace mla::kernels
