"""Shared helpers of the mla_decode tests: the float32 torch reference and paged test problems.

Run against the package the build assembled: ``PYTHONPATH=build/python pytest python/tests``.
GPU tests skip cleanly without an sm_90 GPU; the argument tests need no GPU at all.
"""

import dataclasses
import math
from typing import List, Optional

import pytest
import torch

PAGE = 64
D_QK = 576
D_V = 512


def have_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


requires_sm90 = pytest.mark.skipif(not have_sm90(), reason="needs an sm_90 GPU (H100/H200)")


@dataclasses.dataclass
class PagedProblem:
    q: torch.Tensor  # [b, s_q, h_q, 576] bf16
    k_cache: torch.Tensor  # [num_blocks, 64, h_kv, 576] bf16, NaN wherever no sequence owns it
    block_table: torch.Tensor  # [b, max_blocks] int32, a random permutation of the pages
    cache_seqlens: torch.Tensor  # [b] int32
    causal: bool
    softmax_scale: float

    @property
    def shape(self):
        b, s_q, h_q, _ = self.q.shape
        return b, s_q, h_q, self.k_cache.shape[2]


def make_problem(
    seqlens: List[int],
    s_q: int,
    h_q: int,
    h_kv: int = 1,
    causal: bool = False,
    capacity: Optional[int] = None,
    sentinel_unused_pages: bool = False,
    softmax_scale: Optional[float] = None,
    seed: int = 0,
) -> PagedProblem:
    """Random q and cache (never zeros), pages in a random order, NaN in every slot a sequence does
    not own (so a read past a sequence's end poisons its output), spare pages also NaN."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    b = len(seqlens)
    capacity = max(capacity or 0, max(seqlens, default=0), 1)
    max_blocks = math.ceil(capacity / PAGE)
    num_blocks = b * max_blocks + 3  # three pages nobody owns
    q = torch.randn(b, s_q, h_q, D_QK, generator=gen, device="cuda").to(torch.bfloat16)
    k_cache = torch.randn(num_blocks, PAGE, h_kv, D_QK, generator=gen, device="cuda").to(
        torch.bfloat16
    )
    perm = torch.randperm(num_blocks, generator=gen, device="cuda")
    block_table = perm[: b * max_blocks].view(b, max_blocks).to(torch.int32)
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32, device="cuda")
    # NaN in the slots past each sequence's end, and in the pages nobody owns.
    positions = torch.arange(max_blocks * PAGE, device="cuda")
    unused = positions[None, :] >= cache_seqlens[:, None].long()
    pages = block_table[:, positions // PAGE].long()
    slots = (positions % PAGE).expand(b, -1)
    k_cache[pages[unused], slots[unused]] = float("nan")
    k_cache[perm[b * max_blocks :]] = float("nan")
    if sentinel_unused_pages:
        # Entries past a sequence's last page are never read: make them wild ids.
        used_pages = (cache_seqlens.long() + PAGE - 1) // PAGE
        past = torch.arange(max_blocks, device="cuda")[None, :] >= used_pages[:, None]
        block_table[past] = 2**30
    scale = D_QK**-0.5 if softmax_scale is None else softmax_scale
    return PagedProblem(q, k_cache, block_table, cache_seqlens, causal, scale)


def reference(p: PagedProblem):
    """FlashMLA's semantics in float32 torch: (out [b, s_q, h_q, 512] fp32, lse [b, h_q, s_q]).
    A row that sees no key gets out = 0 and lse = +inf."""
    b, s_q, h_q, h_kv = p.shape
    out = torch.zeros(b, s_q, h_q, D_V, dtype=torch.float32, device="cuda")
    lse = torch.full((b, h_q, s_q), float("inf"), dtype=torch.float32, device="cuda")
    seqlens = p.cache_seqlens.tolist()
    for i, length in enumerate(seqlens):
        if length <= 0:
            continue
        pages = p.block_table[i, : math.ceil(length / PAGE)].long()
        kv = p.k_cache[pages].reshape(-1, h_kv, D_QK)[:length].float()  # [L, h_kv, 576]
        k = kv.transpose(0, 1).repeat_interleave(h_q // h_kv, dim=0)  # [h_q, L, 576]
        query = p.q[i].float().transpose(0, 1)  # [h_q, s_q, 576]
        scores = (query @ k.transpose(1, 2)) * p.softmax_scale  # [h_q, s_q, L]
        if p.causal:
            visible = length - s_q + 1 + torch.arange(s_q, device="cuda")  # keys row j sees
            masked = torch.arange(length, device="cuda")[None, :] >= visible[:, None]
            scores = scores.masked_fill(masked[None], float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)  # [h_q, s_q]; -inf where nothing is visible
        seen = torch.isfinite(row_lse)
        weights = torch.exp(scores - row_lse[..., None]).nan_to_num(0.0)
        out[i] = (weights @ k[..., :D_V]).transpose(0, 1)
        lse[i] = torch.where(seen, row_lse, torch.full_like(row_lse, float("inf")))
    return out, lse


def assert_close_to_reference(out, lse, p: PagedProblem, label: str = ""):
    b, s_q, h_q, _ = p.shape
    assert out.shape == (b, s_q, h_q, D_V) and out.dtype == torch.bfloat16, label
    assert lse.shape == (b, h_q, s_q) and lse.dtype == torch.float32, label
    want_out, want_lse = reference(p)
    got_out = out.float()
    assert not torch.isnan(got_out).any(), f"{label}: NaN in out"
    assert not torch.isnan(lse).any(), f"{label}: NaN in lse"
    error = (got_out - want_out).norm() / want_out.norm().clamp_min(1e-12)
    assert error <= 3e-3, f"{label}: relative L2 error of out {error:.2e}"
    infinite = torch.isinf(want_lse)
    assert torch.equal(torch.isinf(lse), infinite), f"{label}: lse infinite in the wrong rows"
    assert torch.equal(lse[infinite], want_lse[infinite]), f"{label}: lse = -inf somewhere"
    if (~infinite).any():
        finite_error = (lse - want_lse)[~infinite].abs() / want_lse[~infinite].abs().clamp_min(1)
        assert finite_error.max() <= 2e-5, f"{label}: lse error {finite_error.max():.2e}"
    # Rows that see no key: exactly zero output.
    empty_rows = infinite.transpose(1, 2)  # [b, s_q, h_q]
    assert (got_out[empty_rows] == 0).all(), f"{label}: out not 0 where nothing is visible"


@pytest.fixture(autouse=True)
def _exact_float32_reference():
    # The reference must be float32, not TF32.
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = previous
