"""FlashMLA's Python interface (get_mla_metadata, flash_mla_with_kvcache) over mla.cpp's decode op.

Both of FlashMLA's call patterns work:

* old: ``tile_scheduler_metadata, num_splits = get_mla_metadata(cache_seqlens, s_q * h_q // h_kv,
  h_kv)``; the plan is computed right here, on the device, from ``cache_seqlens``, and every layer
  of the step passes both values to ``flash_mla_with_kvcache``.
* new: ``sched_meta, _ = get_mla_metadata()`` returns an empty ``FlashMLASchedMeta``; the first
  ``flash_mla_with_kvcache`` call fills it (plans from its ``cache_seqlens``), later calls reuse it.

The one thing to know: ``tile_scheduler_metadata`` is this op's whole workspace, an int32 tensor
holding the plan and, after it, the split-KV partial results. Every call overwrites the partials,
so calls that share a metadata tensor must be ordered on one stream (as the layers of a step are).
"""

import dataclasses
import os
from typing import Optional, Tuple, Union

import torch

from . import _C

# "fast" (default) or "baseline": which of our decode kernels runs (the benchmark compares them).
_KERNELS = ("fast", "baseline")
_default_kernel = os.environ.get("MLA_DECODE_KERNEL", "fast")

@dataclasses.dataclass
class FlashMLASchedMeta:
    """The newer call pattern's scheduling state, filled by the first flash_mla_with_kvcache call.

    Reuse it for every call of one decode step (every layer); make a new one (get_mla_metadata())
    for the next step, or capture the step in a CUDA graph: the plan is then recomputed from the
    graph's cache_seqlens on every replay.
    """

    @dataclasses.dataclass(frozen=True)
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int

    have_initialized: bool = False
    config: Optional[Config] = None
    # The workspace: [mla_decode_workspace_size / 4] int32, the plan first, then the partials.
    tile_scheduler_metadata: Optional[torch.Tensor] = None
    # [b + 1] int32, a view into the plan: num_splits[i + 1] - num_splits[i] is how many split-KV
    # pieces sequence i has (0 when it is empty), num_splits[b] the partial results in all.
    num_splits: Optional[torch.Tensor] = None


def _heads_layout(num_q_rows_per_head_k: int) -> Tuple[int, int]:
    """(s_q, h_q / h_kv) with this product and h_q / h_kv <= 128: the plan depends on the product
    alone, so the old pattern's single number is enough to make it."""
    rows = int(num_q_rows_per_head_k)
    if rows < 1:
        raise ValueError(
            f"mla_decode: num_heads_per_head_k (s_q * h_q // h_kv) must be >= 1, got {rows}"
        )
    for seqlen_q in range(1, 129):
        if rows % seqlen_q == 0 and rows // seqlen_q <= 128:
            return seqlen_q, rows // seqlen_q
    raise ValueError(
        f"mla_decode: num_heads_per_head_k (s_q * h_q // h_kv) = {rows} is more than this kernel "
        "supports (s_q <= 128 and h_q / h_kv <= 128)"
    )


def get_mla_metadata(
    cache_seqlens: Optional[torch.Tensor] = None,
    num_heads_per_head_k: Optional[int] = None,
    num_heads_k: Optional[int] = None,
    *args,
    **kwargs,
) -> Tuple[Union[torch.Tensor, FlashMLASchedMeta], Optional[torch.Tensor]]:
    """Scheduling metadata for one decode step, in either of FlashMLA's call patterns.

    Old pattern: ``get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)`` (the second argument
    may also be named ``num_q_tokens_per_head_k``). Plans on the device, on the current stream,
    from ``cache_seqlens`` ([b] int32, CUDA); no host synchronisation, so it can be captured in a
    CUDA graph. The plan never sees the block table: every cache_seqlens[i] must be at most
    block_table.shape[1] * 64, as FlashMLA requires (a longer one gives that sequence undefined
    values; nothing outside its pages and the workspace is read). Returns ``(tile_scheduler_metadata, num_splits)``: the workspace (int32, 1-D) and a
    [b + 1] int32 view into it (see FlashMLASchedMeta.num_splits). Arguments FlashMLA versions
    added for other features (``num_heads_q``, ``num_sm_parts`` style tuning numbers) are accepted
    and ignored; ``is_fp8_kvcache=True`` and ``topk`` (sparse attention) raise NotImplementedError.

    New pattern: ``get_mla_metadata()`` (or any call without cache_seqlens and both counts) returns
    ``(FlashMLASchedMeta(), None)``, filled by the first flash_mla_with_kvcache call.
    """
    rows = kwargs.pop("num_q_tokens_per_head_k", num_heads_per_head_k)
    if kwargs.get("is_fp8_kvcache", False):
        raise NotImplementedError("mla_decode: is_fp8_kvcache=True: only a bf16 cache is supported")
    if kwargs.get("topk") is not None:
        raise NotImplementedError("mla_decode: topk (sparse attention) is not supported")
    if cache_seqlens is None or rows is None or num_heads_k is None:
        return FlashMLASchedMeta(), None
    if not isinstance(cache_seqlens, torch.Tensor):
        raise TypeError(
            f"mla_decode: cache_seqlens must be a torch.Tensor, got {type(cache_seqlens).__name__}"
        )
    num_heads_k = int(num_heads_k)
    seqlen_q, heads_per_kv = _heads_layout(rows)
    return _C.make_metadata(cache_seqlens, seqlen_q, heads_per_kv * num_heads_k, num_heads_k)


def _fill_sched_meta(meta, q, k_cache, block_table, cache_seqlens):
    if q.dim() != 4 or k_cache.dim() != 4 or block_table.dim() != 2:
        raise ValueError(
            "mla_decode: q must be 4-D [b, s_q, h_q, d], k_cache 4-D [num_blocks, page_block_size, "
            f"h_k, d] and block_table 2-D [b, max_blocks], got {tuple(q.shape)}, "
            f"{tuple(k_cache.shape)} and {tuple(block_table.shape)}"
        )
    config = FlashMLASchedMeta.Config(
        q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], k_cache.shape[2]
    )
    if meta.have_initialized:
        if config != meta.config:
            raise ValueError(
                f"mla_decode: this call's shapes {config} differ from those the scheduling "
                f"metadata was made for, {meta.config}: reuse a FlashMLASchedMeta only within one "
                "decode step (make a new one with get_mla_metadata() per step)"
            )
        return
    if k_cache.shape[2] < 1 or q.shape[2] % k_cache.shape[2] != 0:
        raise ValueError(
            f"mla_decode: num_heads_q (q.shape[2] = {q.shape[2]}) must be a multiple of "
            f"num_heads_k (k_cache.shape[2] = {k_cache.shape[2]})"
        )
    metadata, num_splits = _C.make_metadata(
        cache_seqlens, q.shape[1], q.shape[2], k_cache.shape[2], max(block_table.shape[1], 1)
    )
    meta.config = config
    meta.tile_scheduler_metadata = metadata
    meta.num_splits = num_splits
    meta.have_initialized = True


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    head_dim_v: int,
    tile_scheduler_metadata: Union[torch.Tensor, FlashMLASchedMeta],
    num_splits: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    *,
    kernel: Optional[str] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """MLA decode attention over a paged latent cache, on the current CUDA stream.

    Arguments (FlashMLA's, in its order):
        q: [b, s_q, h_q, 576] bf16 (576 = kv_lora_rank 512 + rope 64; the last dim contiguous).
        k_cache: [num_blocks, 64, h_kv, 576] bf16, page size 64; V is its first 512 columns.
        block_table: [b, max_num_blocks_per_seq] int32 page ids.
        cache_seqlens: [b] int32, keys per sequence (0 allowed: out = 0, lse = +inf).
        head_dim_v: must be 512.
        tile_scheduler_metadata: what get_mla_metadata returned first (a tensor or a
            FlashMLASchedMeta).
        num_splits: what get_mla_metadata returned second (or None); not needed, ignored.
        softmax_scale: default 576 ** -0.5, as FlashMLA's (1 / sqrt of q's head dim). For DeepSeek
            models pass the model's own: qk_head_dim ** -0.5 (192 ** -0.5) times YaRN's mscale ** 2,
            not 576 ** -0.5.
        causal: with s_q > 1, query i of a sequence of length L sees keys [0, L - s_q + i].
        is_fp8_kvcache, indices, attn_sink, extra_k_cache, extra_indices_in_kvcache, topk_length,
            extra_topk_length: FlashMLA's FP8 and sparse modes, not supported (NotImplementedError).
        kernel: ours, keyword only: "fast" (default, or $MLA_DECODE_KERNEL) or "baseline".

    Returns (out [b, s_q, h_q, 512] bf16, softmax_lse [b, h_q, s_q] fp32, natural log).
    Raises ValueError or TypeError for a bad argument, RuntimeError for a CUDA failure.
    """
    if is_fp8_kvcache:
        raise NotImplementedError(
            "mla_decode: is_fp8_kvcache=True: this kernel reads a bf16 latent cache only"
        )
    sparse = (indices, attn_sink, extra_k_cache, extra_indices_in_kvcache, topk_length,
              extra_topk_length)
    if any(value is not None for value in sparse):
        names = ("indices", "attn_sink", "extra_k_cache", "extra_indices_in_kvcache",
                 "topk_length", "extra_topk_length")
        given = [name for name, value in zip(names, sparse) if value is not None]
        raise NotImplementedError(
            f"mla_decode: {', '.join(given)}: sparse attention is not supported (dense decode only)"
        )
    if block_table is None or cache_seqlens is None:
        raise ValueError("mla_decode: block_table and cache_seqlens are required (dense decode)")
    for name, value in (("q", q), ("k_cache", k_cache), ("block_table", block_table),
                        ("cache_seqlens", cache_seqlens)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"mla_decode: {name} must be a torch.Tensor, got {type(value).__name__}")
    kernel = _default_kernel if kernel is None else kernel
    if kernel not in _KERNELS:
        raise ValueError(f"mla_decode: kernel must be one of {_KERNELS}, got {kernel!r}")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5

    if isinstance(tile_scheduler_metadata, FlashMLASchedMeta):
        _fill_sched_meta(tile_scheduler_metadata, q, k_cache, block_table, cache_seqlens)
        metadata = tile_scheduler_metadata.tile_scheduler_metadata
    elif isinstance(tile_scheduler_metadata, torch.Tensor):
        metadata = tile_scheduler_metadata
    else:
        raise TypeError(
            "mla_decode: tile_scheduler_metadata must be what get_mla_metadata returned (a "
            f"torch.Tensor or a FlashMLASchedMeta), got {type(tile_scheduler_metadata).__name__}"
        )
    return _C.decode(
        q, k_cache, block_table, cache_seqlens, int(head_dim_v), metadata,
        float(softmax_scale), bool(causal), kernel == "fast",
    )
