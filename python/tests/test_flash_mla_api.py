"""mla_decode's FlashMLA interface on the GPU against a float32 torch reference, in the manner of
FlashMLA's dense decoding test: random inputs, permuted block tables, NaN in every slot a sequence
does not own, seqlen 0, ragged lengths, h_q in {1, 3, 9, 63, 64, 126, 128}, s_q in {1, 2, 4},
causal on and off, both call patterns and both kernels."""

import random
import zlib

import pytest
import torch

import mla_decode
from conftest import D_QK, assert_close_to_reference, make_problem, requires_sm90

pytestmark = requires_sm90

HEADS = [1, 3, 9, 63, 64, 126, 128]


def run_old_pattern(p, kernel="fast"):
    b, s_q, h_q, h_kv = p.shape
    metadata, num_splits = mla_decode.get_mla_metadata(p.cache_seqlens, s_q * h_q // h_kv, h_kv)
    return mla_decode.flash_mla_with_kvcache(
        p.q, p.k_cache, p.block_table, p.cache_seqlens, 512, metadata, num_splits,
        softmax_scale=p.softmax_scale, causal=p.causal, kernel=kernel,
    )


def run_new_pattern(p, kernel="fast"):
    sched_meta, none = mla_decode.get_mla_metadata()
    assert none is None
    return mla_decode.flash_mla_with_kvcache(
        p.q, p.k_cache, p.block_table, p.cache_seqlens, 512, sched_meta, None,
        softmax_scale=p.softmax_scale, causal=p.causal, kernel=kernel,
    )


@pytest.mark.parametrize("kernel", ["fast", "baseline"])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s_q", [1, 2, 4])
@pytest.mark.parametrize("h_q", HEADS)
def test_dense_decode(h_q, s_q, causal, varlen, kernel):
    rng = random.Random(zlib.crc32(f"{h_q} {s_q} {causal} {varlen} {kernel}".encode()))
    if varlen:
        # Ragged, an empty sequence, lengths that are not multiples of 64, one shorter than s_q.
        seqlens = [0, 1, 63, 65, 200, 517, 1000, rng.randint(1, 2000)]
        rng.shuffle(seqlens)
        seqlens = seqlens[: rng.randint(4, 8)]
    else:
        seqlens = [rng.choice([64, 1000, 1217])] * rng.choice([1, 3, 5])
    p = make_problem(seqlens, s_q, h_q, causal=causal, seed=rng.randint(0, 2**31),
                     sentinel_unused_pages=varlen)
    run = run_old_pattern if (h_q + s_q) % 2 else run_new_pattern
    out, lse = run(p, kernel)
    label = f"h_q {h_q} s_q {s_q} causal {causal} seqlens {seqlens} kernel {kernel}"
    assert_close_to_reference(out, lse, p, label)
    # Same inputs again: bit-identical.
    out2, lse2 = run(p, kernel)
    assert torch.equal(out, out2) and torch.equal(lse, lse2), label


@pytest.mark.parametrize("b", [1, 2, 7, 33, 131, 256])
def test_batch_sizes(b):
    rng = random.Random(b)
    seqlens = [rng.randint(0, 300 if b > 100 else 1500) for _ in range(b)]
    p = make_problem(seqlens, s_q=1 + b % 2, h_q=16 if b % 2 == 0 else 64, causal=True, seed=b)
    out, lse = run_old_pattern(p)
    assert_close_to_reference(out, lse, p, f"b {b}")


def test_one_long_sequence_among_short_ones():
    rng = random.Random(5)
    seqlens = [rng.randint(0, 100) for _ in range(40)]
    seqlens[17] = 30001
    p = make_problem(seqlens, s_q=2, h_q=16, causal=True, seed=5)
    out, lse = run_new_pattern(p)
    assert_close_to_reference(out, lse, p, "one of 30001 tokens among 39 short ones")


def test_several_kv_heads():
    p = make_problem([300, 0, 1025], s_q=2, h_q=32, h_kv=2, causal=True, seed=8)
    out, lse = run_old_pattern(p)
    assert_close_to_reference(out, lse, p, "h_kv 2")


def test_default_softmax_scale_is_576_to_the_minus_half():
    p = make_problem([700, 129], s_q=1, h_q=16, seed=3)
    metadata, num_splits = mla_decode.get_mla_metadata(p.cache_seqlens, 16, 1)
    out, lse = mla_decode.flash_mla_with_kvcache(
        p.q, p.k_cache, p.block_table, p.cache_seqlens, 512, metadata, num_splits
    )
    assert p.softmax_scale == D_QK**-0.5
    assert_close_to_reference(out, lse, p, "default scale")


def test_deepseek_softmax_scale():
    # DeepSeek-V3: 192 ** -0.5 * mscale ** 2 (mscale = 0.1 * 1.0 * ln(40) + 1).
    mscale = 0.1 * torch.log(torch.tensor(40.0)).item() + 1
    p = make_problem([1000, 65, 3], s_q=2, h_q=128, causal=True, seed=4,
                     softmax_scale=192**-0.5 * mscale**2)
    out, lse = run_new_pattern(p)
    assert_close_to_reference(out, lse, p, "DeepSeek scale")


def test_strided_q_and_cache_views():
    # q and the cache as slices of wider tensors: strides are honoured, nothing is copied.
    p = make_problem([700, 129, 0], s_q=2, h_q=16, causal=True, seed=21)
    wide_q = torch.full((*p.q.shape[:3], D_QK + 64), float("nan"), dtype=torch.bfloat16,
                        device="cuda")
    wide_q[..., :D_QK] = p.q
    wide_k = torch.full((*p.k_cache.shape[:3], D_QK + 128), float("nan"), dtype=torch.bfloat16,
                        device="cuda")
    wide_k[..., :D_QK] = p.k_cache
    q_view, k_view = wide_q[..., :D_QK], wide_k[..., :D_QK]
    sched_meta, _ = mla_decode.get_mla_metadata()
    out, lse = mla_decode.flash_mla_with_kvcache(
        q_view, k_view, p.block_table, p.cache_seqlens, 512, sched_meta,
        softmax_scale=p.softmax_scale, causal=True,
    )
    assert_close_to_reference(out, lse, p, "strided views")


def test_size_one_dimensions_with_odd_strides():
    # torch gives size-1 dimensions arbitrary strides (as_strided, some views): they must not matter.
    p = make_problem([50], s_q=1, h_q=1, causal=True, seed=22)
    one_page = p.k_cache[p.block_table[0, 0].long()].unsqueeze(0)  # [1, 64, 1, 576]
    k_odd = torch.as_strided(one_page, (1, 64, 1, D_QK), (5, D_QK, 3, 1))
    q_odd = torch.as_strided(p.q, (1, 1, 1, D_QK), (7, 5, 3, 1))
    table_odd = torch.zeros(1, dtype=torch.int32, device="cuda").as_strided((1, 1), (9, 7))
    odd = type(p)(q_odd, k_odd, table_odd, p.cache_seqlens, True, p.softmax_scale)
    sched_meta, _ = mla_decode.get_mla_metadata()
    out, lse = mla_decode.flash_mla_with_kvcache(
        q_odd, k_odd, table_odd, p.cache_seqlens, 512, sched_meta,
        softmax_scale=p.softmax_scale, causal=True,
    )
    assert_close_to_reference(out, lse, odd, "size-1 dimensions with odd strides")


def test_new_pattern_reuses_the_plan_across_layers():
    p = make_problem([1500, 3, 700, 0, 64], s_q=2, h_q=64, causal=True, seed=9)
    sched_meta, _ = mla_decode.get_mla_metadata()
    for layer in range(3):
        q = torch.randn_like(p.q, dtype=torch.float32).to(torch.bfloat16)
        layer_problem = type(p)(q, p.k_cache, p.block_table, p.cache_seqlens, p.causal,
                                p.softmax_scale)
        out, lse = mla_decode.flash_mla_with_kvcache(
            q, p.k_cache, p.block_table, p.cache_seqlens, 512, sched_meta, None,
            softmax_scale=p.softmax_scale, causal=True,
        )
        assert sched_meta.have_initialized
        assert_close_to_reference(out, lse, layer_problem, f"layer {layer}")
    with pytest.raises(ValueError, match="differ from those the scheduling metadata was made for"):
        mla_decode.flash_mla_with_kvcache(
            p.q[:, :1].contiguous(), p.k_cache, p.block_table, p.cache_seqlens, 512, sched_meta
        )


def test_num_splits_is_the_plans_split_prefix():
    seqlens = [0, 1, 4000, 65, 30000, 7, 0, 2048]
    p = make_problem(seqlens, s_q=2, h_q=64, seed=11)
    rows = 2 * 64
    metadata, num_splits = mla_decode.get_mla_metadata(p.cache_seqlens, rows, 1)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    layout = mla_decode._C.metadata_layout(len(seqlens), 2, 64, 1, num_sms)
    assert metadata.dtype == torch.int32 and metadata.shape == (layout["ints"],)
    assert num_splits.dtype == torch.int32 and num_splits.shape == (len(seqlens) + 1,)
    unbounded_pages = (2**31 - 1) // 64
    want_plan = mla_decode._C.plan_host(
        seqlens, layout["num_parts"], unbounded_pages, layout["rows_per_tile"]
    )
    assert metadata[: len(want_plan)].tolist() == want_plan
    splits = num_splits.tolist()
    assert splits[0] == 0 and splits == sorted(splits)
    assert splits[-1] == want_plan[1] <= layout["max_splits"]  # total partials
    assert all(splits[i + 1] == splits[i] for i, n in enumerate(seqlens) if n == 0)
    # The same plan through the newer pattern (max pages = the block table's width).
    sched_meta, _ = mla_decode.get_mla_metadata()
    mla_decode.flash_mla_with_kvcache(p.q, p.k_cache, p.block_table, p.cache_seqlens, 512,
                                      sched_meta)
    assert sched_meta.num_splits.tolist() == splits


def test_runs_on_the_current_stream():
    p = make_problem([3000, 17, 900], s_q=1, h_q=128, causal=True, seed=12)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        metadata, num_splits = mla_decode.get_mla_metadata(p.cache_seqlens, 128, 1)
        out, lse = mla_decode.flash_mla_with_kvcache(
            p.q, p.k_cache, p.block_table, p.cache_seqlens, 512, metadata, num_splits,
            softmax_scale=p.softmax_scale, causal=True,
        )
        done = torch.cuda.Event()
        done.record(side)
    done.synchronize()
    assert_close_to_reference(out, lse, p, "side stream")


def test_bad_arguments_on_the_gpu():
    p = make_problem([100, 200], s_q=1, h_q=16, seed=13)
    metadata, num_splits = mla_decode.get_mla_metadata(p.cache_seqlens, 16, 1)

    def call(**changes):
        args = dict(q=p.q, k_cache=p.k_cache, block_table=p.block_table,
                    cache_seqlens=p.cache_seqlens, head_dim_v=512,
                    tile_scheduler_metadata=metadata, num_splits=num_splits)
        args.update(changes)
        return mla_decode.flash_mla_with_kvcache(**args)

    with pytest.raises(ValueError, match="block_table must be a CUDA tensor"):
        call(block_table=p.block_table.cpu())
    with pytest.raises(ValueError, match="16-byte aligned"):
        wide = torch.zeros(*p.q.shape[:3], D_QK + 8, dtype=torch.bfloat16, device="cuda")
        call(q=wide[..., 1 : D_QK + 1])
    with pytest.raises(ValueError, match="another batch size"):
        call(q=p.q[:1], block_table=p.block_table[:1], cache_seqlens=p.cache_seqlens[:1])
    with pytest.raises(ValueError, match="another batch size"):
        call(q=p.q.repeat(1, 1, 2, 1))  # 32 heads against a plan made for 16 rows per kv head


def test_batch_of_zero():
    p = make_problem([5], s_q=1, h_q=16, seed=14)
    empty_lengths = p.cache_seqlens[:0]
    metadata, num_splits = mla_decode.get_mla_metadata(empty_lengths, 16, 1)
    out, lse = mla_decode.flash_mla_with_kvcache(
        p.q[:0], p.k_cache, p.block_table[:0], empty_lengths, 512, metadata, num_splits
    )
    assert out.shape == (0, 1, 16, 512) and lse.shape == (0, 16, 1)
