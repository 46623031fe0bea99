// Host side of mla/kernels/sampling.h: the workspace size and the boundary checks (no CUDA calls,
// so they are tested on the CPU).
#include "core/error.h"
#include "mla/kernels/sampling.h"
#include "sampling/sampling_layout.h"

namespace mla::kernels {

size_t sampling_workspace_size(int64_t max_rows, int64_t vocab) {
  if (max_rows < 0) throw_error("sampling_workspace_size: max_rows must be >= 0, got {}", max_rows);
  if (vocab < 1 || vocab >= kSamplingMaxVocab)
    throw_error("sampling_workspace_size: vocab must be in [1, {}), got {}", kSamplingMaxVocab,
                vocab);
  return size_t(max_rows) * sampling_row_workspace_bytes(vocab);
}

void check_sampling_params(const SamplingParams& p) {
  if (p.rows < 0 || p.rows > 0x7fffffff)
    throw_error("launch_sampling: rows must be in [0, 2^31) (one CTA per row), got {}", p.rows);
  if (p.vocab < 1 || p.vocab >= kSamplingMaxVocab)
    throw_error("launch_sampling: vocab must be in [1, {}), got {}", kSamplingMaxVocab, p.vocab);
  if (p.rows == 0) return;
  if (p.logits == nullptr) throw_error("launch_sampling: logits is null");
  if (p.logits_row_stride < p.vocab)
    throw_error("launch_sampling: logits_row_stride must be >= vocab ({}), got {}", p.vocab,
                p.logits_row_stride);
  if (p.row_params == nullptr) throw_error("launch_sampling: row_params is null");
  if (p.out_tokens == nullptr) throw_error("launch_sampling: out_tokens is null");
  if (p.context_offsets == nullptr)
    throw_error("launch_sampling: context_offsets is null (give rows + 1 offsets, all 0 for none)");
  if (p.prompt_lengths == nullptr) throw_error("launch_sampling: prompt_lengths is null");
  if ((p.out_top_ids == nullptr) != (p.out_top_logprobs == nullptr))
    throw_error(
        "launch_sampling: out_top_ids and out_top_logprobs must be both given or both null");
  if (p.workspace == nullptr) throw_error("launch_sampling: workspace is null");
  if (reinterpret_cast<uintptr_t>(p.workspace) % kSamplingWorkspaceAlignment != 0)
    throw_error("launch_sampling: workspace must be {}-byte aligned, got address {}",
                kSamplingWorkspaceAlignment, p.workspace);
  const size_t need = sampling_workspace_size(p.rows, p.vocab);
  if (p.workspace_bytes < need)
    throw_error(
        "launch_sampling: workspace too small for {} rows of vocab {}: need {} bytes, got {} "
        "(hint: sampling_workspace_size(max_rows, vocab))",
        p.rows, p.vocab, need, p.workspace_bytes);
}

}  // namespace mla::kernels
