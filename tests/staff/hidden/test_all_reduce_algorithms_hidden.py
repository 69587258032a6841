"""Hidden tests for Task 1.7 (never shipped to students): several extra ranks, tensors cut into segments.

    pytest tests/staff/hidden/test_all_reduce_algorithms_hidden.py --impl reference

At 6 and 7 ranks recursive doubling folds 2 and 3 extra ranks (the public run's sizes, 1-4 and 8,
fold at most one), and a tensor of 2.4 MB is exchanged in two pieces, added in place while its
own pieces are still leaving. The algorithms run back to back on every rank with no barrier, so a
message of one that reaches the next shows as a wrong sum.
"""

from __future__ import annotations

import pytest
import torch

from tests.harness import CONFIG, assert_close, run_ranks

SIZES = [6, 7]
CASES = [(torch.int64, (0,)), (torch.int64, (5,)), (torch.float32, (33, 17)), (torch.int64, (300_001,))]
RUNS = [("ring", "sum"), ("recursive_doubling", "sum"), ("auto", "sum"), ("recursive_doubling", "avg")]


def _inputs(n: int) -> list[list[torch.Tensor]]:
    """inputs[rank][case]: small integers, so that every sum is exact."""
    return [[torch.randint(-20, 21, shape, generator=torch.Generator().manual_seed(31 * r + i)).to(dtype)
             for i, (dtype, shape) in enumerate(CASES)] for r in range(n)]  # fmt: skip


def back_to_back_rank(ctx, inputs):
    C = ctx.load("collectives")
    out = []
    for algorithm, op in RUNS:
        for x in inputs[ctx.rank]:
            if op == "avg" and not x.is_floating_point():
                continue
            y = x.clone().to(ctx.device)
            C.all_reduce(y, op, algorithm=algorithm)
            out.append(y)
    return out


@pytest.mark.task1_7
@pytest.mark.deadline(60)
@pytest.mark.parametrize("n", SIZES, ids=[f"w{n}" for n in SIZES])
def test_every_algorithm_at_world_sizes_with_several_extra_ranks(n):
    """Every algorithm, back to back, gives the exact sum (and the mean) at 6 and 7 ranks, 2.4 MB tensors included."""
    if CONFIG.backend == "nccl" and n > torch.cuda.device_count():
        pytest.skip(f"world size {n} needs {n} GPUs")
    inputs = _inputs(n)
    outs = run_ranks(n, back_to_back_rank, inputs)
    expected, names = [], []
    for algorithm, op in RUNS:
        for i, (dtype, shape) in enumerate(CASES):
            if op == "avg" and not dtype.is_floating_point:
                continue
            total = torch.stack([inputs[r][i].double() for r in range(n)]).sum(0)
            expected.append((total / n if op == "avg" else total).to(dtype))
            names.append(f"all_reduce({op}, algorithm={algorithm!r}) of {str(dtype)[6:]} {shape}")
    for rank, got in enumerate(outs):
        for g, want, name in zip(got, expected, names):
            assert_close(g, want, what=f"rank {rank}, {name}")
