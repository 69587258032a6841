"""``run_ranks``: the one call a test makes to run a function on every rank."""

from __future__ import annotations

import pytest

from tests.harness.config import CONFIG
from tests.harness.defaults import resolve_impl
from tests.harness.pool import get_pool


def run_ranks(world_size: int, fn, *args, deadline: float | None = None, impl: str | None = None, **kwargs) -> list:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks and return the list of results.

    ``fn`` must be a module-level function; tensors in the results come back on the CPU. If any
    rank raises, dies or misses the deadline, raises ``RankFailure`` describing every rank.
    ``deadline`` and ``impl`` default to ``CONFIG`` (the command line).
    """
    __tracebackhide__ = True
    if CONFIG.backend == "nccl":
        _skip_without_a_gpu_per_rank(world_size)
    pool = get_pool(world_size, CONFIG.backend)
    return pool.run(fn, args, kwargs, impl=resolve_impl(impl or CONFIG.impl), deadline=deadline or CONFIG.deadline)


def gpu_shortfall(world_size: int) -> str | None:
    """Why ``world_size`` ranks cannot run on NCCL here, or None: NCCL puts rank r on cuda:r and refuses two
    ranks on one GPU, so a world size above the node's GPU count is skipped, saying why (the parametrized
    world sizes in tests/conftest.py, and fixed-size tests through ``run_ranks``)."""
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return (
        f"world size {world_size} needs {world_size} GPUs on nccl (one per rank), {have} visible"
        if world_size > have
        else None
    )


def _skip_without_a_gpu_per_rank(world_size: int) -> None:
    reason = gpu_shortfall(world_size)
    if reason:
        pytest.skip(reason)
