"""Hidden tests for part 1 (never shipped to students): odd world sizes, big tensors, back-to-back calls.

    pytest tests/staff/hidden/test_collectives_hidden.py --impl reference

They use explicit world sizes (3 and 5 are not powers of two, so trees are unbalanced and ring chunks
unequal) instead of ``--world-sizes``; on NCCL a size larger than the visible GPUs is skipped.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import assert_close, run_ranks

ODD_SIZES = [3, 5]


def _data(n: int, shape, seed_base: int, dtype=torch.float64) -> list[torch.Tensor]:
    return [torch.randint(-50, 51, shape, generator=torch.Generator().manual_seed(seed_base + r)).to(dtype)
            for r in range(n)]  # fmt: skip


def back_to_back_rank(ctx, inputs):
    """Several collectives with no barrier between them: messages of one must not feed the next."""
    C = ctx.load("collectives")
    x = inputs[ctx.rank].to(ctx.device)
    a = x.clone()
    C.all_reduce(a, algorithm="ring")
    b = x.clone()
    C.broadcast(b, src=ctx.world_size - 1)
    c = x.clone()
    C.reduce(c, dst=1)
    g = C.all_gather(x)
    s = C.reduce_scatter(torch.cat([x] * ctx.world_size))
    return a, b, c, g, s


@pytest.mark.task1_5
@pytest.mark.parametrize("n", ODD_SIZES, ids=[f"w{n}" for n in ODD_SIZES])
def test_back_to_back_collectives_on_odd_world_sizes(n):
    """Five collectives back to back at world sizes 3 and 5 each give the right result on every rank."""
    inputs = _data(n, (7, 3), 100)
    outs = run_ranks(n, back_to_back_rank, inputs)
    total = torch.stack(inputs).sum(0)
    for r, (a, b, c, g, s) in enumerate(outs):
        assert_close(a, total, what=f"rank {r}, all_reduce")
        assert_close(b, inputs[-1], what=f"rank {r}, broadcast from {n - 1}")
        assert_close(c, total if r == 1 else inputs[r], what=f"rank {r}, reduce to 1")
        assert_close(g, torch.cat(inputs), what=f"rank {r}, all_gather")
        # reduce_scatter of [x, x, ..., x] (n copies): every rank's chunk is the sum of the x's.
        assert_close(s, total, what=f"rank {r}, reduce_scatter")


def big_all_reduce_rank(ctx, numel: int):
    x = torch.arange(numel, dtype=torch.float32, device=ctx.device) % 97 + ctx.rank
    ctx.load("collectives").all_reduce(x, algorithm="ring")
    return x[:5], x[-5:], x.sum()


@pytest.mark.task1_5
@pytest.mark.deadline(60)
@pytest.mark.parametrize("n", [3], ids=["w3"])
def test_all_reduce_of_a_large_tensor_with_unequal_chunks(n):
    """all_reduce of 4 MiB that does not split evenly over 3 ranks sums every element, the last chunk included."""
    numel = (1 << 20) + 7  # 4 MiB of float32, not divisible by 3
    outs = run_ranks(n, big_all_reduce_rank, numel)
    full = (torch.arange(numel, dtype=torch.float64) % 97) * n + sum(range(n))
    for r, (head, tail, total) in enumerate(outs):
        assert_close(head, full[:5].float(), what=f"rank {r}, first elements")
        assert_close(tail, full[-5:].float(), what=f"rank {r}, last elements")
        assert_close(total.double(), full.sum(), what=f"rank {r}, sum of all elements", rtol=1e-5)


def all_to_all_rank(ctx):
    n = ctx.world_size
    pieces = [torch.full(((ctx.rank * 3 + j) % 4, 3), float(100 * ctx.rank + j), device=ctx.device) for j in range(n)]
    return ctx.load("collectives").all_to_all(pieces)


@pytest.mark.task1_6
@pytest.mark.parametrize("n", ODD_SIZES, ids=[f"w{n}" for n in ODD_SIZES])
def test_all_to_all_on_odd_world_sizes(n):
    """all_to_all with pieces of unequal (also empty) sizes at world sizes 3 and 5 delivers piece i of rank j to i."""
    outs = run_ranks(n, all_to_all_rank)
    for j, got in enumerate(outs):
        assert isinstance(got, list) and len(got) == n, f"rank {j}: expected a list of {n} tensors, got {got!r}"
        for i, g in enumerate(got):
            want = torch.full(((i * 3 + j) % 4, 3), float(100 * i + j))
            assert_close(g, want, what=f"rank {j}, all_to_all result[{i}] (from rank {i})")
