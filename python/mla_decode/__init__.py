"""mla_decode: mla.cpp's MLA decode kernel (H100/H200, sm_90a) behind DeepSeek FlashMLA's Python API.

A drop-in for FlashMLA's dense bf16 decode::

    import mla_decode as flash_mla   # instead of: import flash_mla
    tile_scheduler_metadata, num_splits = flash_mla.get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512,
                                                tile_scheduler_metadata, num_splits, causal=True)

See interface.py for both call patterns, what the metadata holds, and what is not supported.
"""

import torch  # noqa: F401  (first: loads the CUDA and torch libraries the extension links)

from . import _C  # noqa: F401
from .interface import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata

__all__ = ["FlashMLASchedMeta", "flash_mla_with_kvcache", "get_mla_metadata"]
