"""A decode step (plan + several layers) captured in a CUDA graph and replayed with new lengths:
the plan is recomputed on the device from the graph's cache_seqlens on every replay, in both of
FlashMLA's call patterns."""

import random

import pytest
import torch

import mla_decode
from conftest import PagedProblem, assert_close_to_reference, make_problem, requires_sm90

pytestmark = requires_sm90

NUM_LAYERS = 3
CAPACITY = 2000


@pytest.mark.parametrize("pattern", ["old", "new"])
@pytest.mark.parametrize("kernel", ["fast", "baseline"])
def test_graph_replay_with_changing_seqlens(pattern, kernel):
    b, s_q, h_q = 6, 2, 64
    base = make_problem([CAPACITY] * b, s_q, h_q, causal=True, seed=4242)
    gen = torch.Generator(device="cuda").manual_seed(7)
    # Static inputs, one q and one cache per layer; the graph reads them where they are.
    qs = [torch.randn(base.q.shape, generator=gen, device="cuda").to(torch.bfloat16)
          for _ in range(NUM_LAYERS)]
    caches = [base.k_cache] + [
        torch.randn(base.k_cache.shape, generator=gen, device="cuda").to(torch.bfloat16)
        for _ in range(NUM_LAYERS - 1)
    ]
    cache_seqlens = base.cache_seqlens.clone()

    def step():
        if pattern == "old":
            metadata, num_splits = mla_decode.get_mla_metadata(cache_seqlens, s_q * h_q, 1)
        else:
            metadata, num_splits = mla_decode.get_mla_metadata()
        return [
            mla_decode.flash_mla_with_kvcache(
                qs[layer], caches[layer], base.block_table, cache_seqlens, 512, metadata,
                num_splits, softmax_scale=base.softmax_scale, causal=True, kernel=kernel,
            )
            for layer in range(NUM_LAYERS)
        ]

    # Warm up on a side stream, as torch.cuda.graphs asks, then capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_outputs = step()

    rng = random.Random(11)
    for replay in range(6):
        seqlens = [rng.randint(0, CAPACITY) for _ in range(b)]
        if replay == 2:
            seqlens = [0, 0, 0, 0, 0, 1]
        if replay == 3:
            seqlens = [CAPACITY, 1, CAPACITY, 64, CAPACITY, CAPACITY - 1]
        cache_seqlens.copy_(torch.tensor(seqlens, dtype=torch.int32))
        for q in qs:  # new queries too: nothing may be cached between replays
            q.copy_(torch.randn(q.shape, generator=gen, device="cuda").to(torch.bfloat16))
        for out, lse in static_outputs:
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for layer, (out, lse) in enumerate(static_outputs):
            # Slots past the new lengths hold real values now: attending to them fails here.
            p = PagedProblem(qs[layer], caches[layer], base.block_table, cache_seqlens, True,
                             base.softmax_scale)
            assert_close_to_reference(out, lse, p, f"{pattern} replay {replay} layer {layer}")
