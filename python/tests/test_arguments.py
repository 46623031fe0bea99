"""mla_decode's argument handling: what needs no GPU (runs on any machine with torch and the built
extension): FlashMLA's signatures and call patterns, NotImplementedError for FP8 and sparse
modes, and a clear ValueError/TypeError for every bad shape, dtype, device, page size and head dim
before anything touches a GPU."""

import inspect

import pytest
import torch

import mla_decode
from mla_decode import interface


def cpu_inputs(b=2, s_q=1, h_q=16, h_kv=1, blocks=4, max_blocks=2, d=576, page=64,
               dtype=torch.bfloat16):
    q = torch.randn(b, s_q, h_q, d).to(dtype)
    k_cache = torch.randn(blocks, page, h_kv, d).to(dtype)
    block_table = torch.arange(b * max_blocks, dtype=torch.int32).view(b, max_blocks) % blocks
    cache_seqlens = torch.full((b,), 70, dtype=torch.int32)
    metadata = torch.zeros(1000, dtype=torch.int32)
    return dict(q=q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens,
                head_dim_v=512, tile_scheduler_metadata=metadata)


def call(**changes):
    args = cpu_inputs()
    args.update(changes)
    return mla_decode.flash_mla_with_kvcache(**args)


def test_flashmla_signatures():
    params = list(inspect.signature(mla_decode.flash_mla_with_kvcache).parameters)
    assert params[:10] == ["q", "k_cache", "block_table", "cache_seqlens", "head_dim_v",
                           "tile_scheduler_metadata", "num_splits", "softmax_scale", "causal",
                           "is_fp8_kvcache"]
    params = list(inspect.signature(mla_decode.get_mla_metadata).parameters)
    assert params[:3] == ["cache_seqlens", "num_heads_per_head_k", "num_heads_k"]


def test_new_pattern_returns_an_empty_sched_meta():
    meta, none = mla_decode.get_mla_metadata()
    assert isinstance(meta, mla_decode.FlashMLASchedMeta) and none is None
    assert not meta.have_initialized and meta.tile_scheduler_metadata is None
    # The newer FlashMLA accepts and ignores arguments here; so do we, without both counts.
    meta, none = mla_decode.get_mla_metadata(torch.zeros(3, dtype=torch.int32))
    assert isinstance(meta, mla_decode.FlashMLASchedMeta) and none is None


def test_fp8_and_sparse_are_not_implemented():
    with pytest.raises(NotImplementedError, match="is_fp8_kvcache"):
        mla_decode.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 16, 1, is_fp8_kvcache=True)
    with pytest.raises(NotImplementedError, match="topk"):
        mla_decode.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 16, 1, topk=2048)
    with pytest.raises(NotImplementedError, match="is_fp8_kvcache"):
        call(is_fp8_kvcache=True)
    with pytest.raises(NotImplementedError, match="indices, attn_sink: sparse attention"):
        call(indices=torch.zeros(2, 1, 64, dtype=torch.int32), attn_sink=torch.zeros(16))


def test_old_pattern_needs_cuda_seqlens():
    with pytest.raises(ValueError, match="cache_seqlens must be a CUDA tensor"):
        mla_decode.get_mla_metadata(torch.zeros(4, dtype=torch.int32), 2 * 64, 1)
    with pytest.raises(TypeError, match="cache_seqlens must be torch.int32"):
        mla_decode.get_mla_metadata(torch.zeros(4, dtype=torch.int64), 64, 1)
    with pytest.raises(ValueError, match="cache_seqlens must be 1-D"):
        mla_decode.get_mla_metadata(torch.zeros(4, 1, dtype=torch.int32), 64, 1)
    with pytest.raises(TypeError, match="cache_seqlens must be a torch.Tensor"):
        mla_decode.get_mla_metadata([1, 2, 3], 64, 1)


def test_old_pattern_heads_layout():
    # The plan depends on s_q * h_q / h_kv alone; any split with h_q / h_kv <= 128 makes it.
    assert interface._heads_layout(16) == (1, 16)
    assert interface._heads_layout(128) == (1, 128)
    assert interface._heads_layout(4 * 128) == (4, 128)
    assert interface._heads_layout(2 * 126) == (2, 126)
    assert interface._heads_layout(4 * 63) == (2, 126)
    assert interface._heads_layout(127 * 3) == (3, 127)
    with pytest.raises(ValueError, match="more than this kernel supports"):
        interface._heads_layout(129 * 128)
    with pytest.raises(ValueError, match=">= 1"):
        interface._heads_layout(0)


@pytest.mark.parametrize(
    "changes, error, message",
    [
        (dict(q=torch.zeros(2, 16, 576, dtype=torch.bfloat16)), ValueError, "q must be 4-D"),
        (dict(q=torch.zeros(2, 1, 16, 512, dtype=torch.bfloat16)), ValueError,
         r"q.shape\[3\] \(head_dim: kv_lora_rank 512 \+ rope 64\) must be 576, got 512"),
        (dict(q=torch.zeros(2, 1, 16, 576, dtype=torch.float16)), TypeError,
         "q must be torch.bfloat16 .* got torch.float16"),
        (dict(k_cache=torch.zeros(4, 32, 1, 576, dtype=torch.bfloat16)), ValueError,
         r"k_cache.shape\[1\] \(page_block_size\) must be 64, got 32"),
        (dict(k_cache=torch.zeros(4, 64, 1, 512, dtype=torch.bfloat16)), ValueError,
         r"k_cache.shape\[3\] .* must be 576, got 512"),
        (dict(k_cache=torch.zeros(4, 64, 1, 576, dtype=torch.float8_e4m3fn)), TypeError,
         "k_cache must be torch.bfloat16"),
        (dict(k_cache=torch.zeros(4, 64, 3, 576, dtype=torch.bfloat16)), ValueError,
         r"num_heads_q \(q.shape\[2\] = 16\) must be a multiple of num_heads_k"),
        (dict(head_dim_v=128), ValueError, "head_dim_v must be 512"),
        (dict(block_table=torch.zeros(3, 2, dtype=torch.int32)), ValueError,
         r"block_table.shape\[0\] \(batch_size, as q.shape\[0\]\) must be 2, got 3"),
        (dict(block_table=torch.zeros(2, 2, dtype=torch.int64)), TypeError,
         "block_table must be torch.int32"),
        (dict(block_table=torch.zeros(2, dtype=torch.int32)), ValueError, "block_table must be 2-D"),
        (dict(block_table=torch.zeros(2, 0, dtype=torch.int32)), ValueError,
         "block_table one column"),
        (dict(cache_seqlens=torch.zeros(3, dtype=torch.int32)), ValueError,
         r"cache_seqlens.shape\[0\] .* must be 2, got 3"),
        (dict(cache_seqlens=torch.zeros(2, dtype=torch.int64)), TypeError,
         "cache_seqlens must be torch.int32"),
        (dict(tile_scheduler_metadata=torch.zeros(10, dtype=torch.int64)), TypeError,
         "tile_scheduler_metadata must be torch.int32"),
        (dict(tile_scheduler_metadata=[1, 2]), TypeError,
         "tile_scheduler_metadata must be what get_mla_metadata returned"),
        (dict(q=torch.zeros(2, 1, 16, 1152, dtype=torch.bfloat16)[..., ::2]), ValueError,
         "q must be contiguous in its last dimension"),
        (dict(block_table=None), ValueError, "block_table and cache_seqlens are required"),
        (dict(q="q"), TypeError, "q must be a torch.Tensor"),
        (dict(kernel="turbo"), ValueError, "kernel must be one of"),
        # Everything well formed, but on the CPU.
        ({}, ValueError, "q must be a CUDA tensor, got one on cpu"),
    ],
)
def test_bad_arguments(changes, error, message):
    with pytest.raises(error, match=message):
        call(**changes)


def test_sched_meta_checks_shapes_before_planning():
    meta, _ = mla_decode.get_mla_metadata()
    with pytest.raises(ValueError, match="q must be 4-D"):
        call(tile_scheduler_metadata=meta, q=torch.zeros(2, 16, 576, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="must be a multiple of num_heads_k"):
        call(tile_scheduler_metadata=meta, k_cache=torch.zeros(4, 64, 3, 576, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="cache_seqlens must be a CUDA tensor"):
        call(tile_scheduler_metadata=meta)
    assert not meta.have_initialized


def test_metadata_layout():
    layout = mla_decode._C.metadata_layout(5, 2, 64, 1, 132)
    # The plan: header (5), cost_begin[b + 1], then num_splits = split_begin[b + 1].
    assert layout["num_splits_offset"] == 5 + 5 + 1
    assert layout["max_splits"] == 5 + layout["num_parts"]
    # Only s_q * h_q / h_kv matters.
    assert layout == mla_decode._C.metadata_layout(5, 1, 128, 1, 132)
    bigger = mla_decode._C.metadata_layout(6, 2, 64, 1, 132)
    assert bigger["ints"] > layout["ints"]
    with pytest.raises(ValueError, match="seqlen_q"):
        mla_decode._C.metadata_layout(5, 129, 1, 1, 132)
    with pytest.raises(ValueError, match="num_heads_q must be a positive multiple"):
        mla_decode._C.metadata_layout(5, 1, 3, 2, 132)


def test_plan_host_split_prefix():
    seqlens = [0, 1, 4000, 65, 30000, 7, 0, 2048]
    layout = mla_decode._C.metadata_layout(len(seqlens), 1, 16, 1, 132)
    plan = mla_decode._C.plan_host(seqlens, layout["num_parts"], 1000, layout["rows_per_tile"])
    offset = layout["num_splits_offset"]
    splits = plan[offset : offset + len(seqlens) + 1]
    assert splits[0] == 0 and splits == sorted(splits) and splits[-1] == plan[1]
    assert splits[1] == 0 and splits[7] == splits[6]  # empty sequences have no pieces
    assert splits[5] - splits[4] > 1  # the long one is split
