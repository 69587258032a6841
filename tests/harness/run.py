"""``run_ranks``: the one call a test makes to run a function on every rank."""

from __future__ import annotations

import pytest

from tests.harness.config import CONFIG, stand_in_gpus
from tests.harness.defaults import env_device_faithful, resolve_impl
from tests.harness.pool import get_pool


def run_ranks(world_size: int, fn, *args, deadline: float | None = None, impl: str | None = None, **kwargs) -> list:
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks and return the list of results.

    ``fn`` must be a module-level function; tensors in the results come back on the CPU. If any
    rank raises, dies or misses the deadline, raises ``RankFailure`` describing every rank.
    ``deadline`` and ``impl`` default to ``CONFIG`` (the command line).
    """
    __tracebackhide__ = True
    need_gpus(world_size, f"world size {world_size}")
    pool = get_pool(world_size, CONFIG.backend)
    return pool.run(fn, args, kwargs, impl=resolve_impl(impl or CONFIG.impl), deadline=deadline or CONFIG.deadline)


def gpu_count() -> int | None:
    """The GPUs this run has, one per rank: the node's on NCCL; in device-faithful mode on gloo, the node it stands
    for when --device-faithful is asked for (the largest --world-sizes, tests/harness/stray_tensors.py); None on
    gloo otherwise (no limit)."""
    if CONFIG.backend == "nccl":
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if env_device_faithful():
        return stand_in_gpus()
    return None


def gpu_shortfall(ranks: int, what: str | None = None) -> str | None:
    """Why ``ranks`` ranks cannot run here, or None: NCCL puts rank r on cuda:r and refuses two ranks on one GPU
    ("Duplicate GPU detected"), so a job of more ranks than GPUs is skipped, saying why. The one rule for the
    parametrized world sizes (tests/conftest.py), fixed-size tests (``run_ranks``) and the jobs a test starts
    through the launcher (``need_gpus``)."""
    have = gpu_count()
    if have is None or ranks <= have:
        return None
    what = what or f"world size {ranks}"
    where = (f"{have} visible" if CONFIG.backend == "nccl"
             else f"device-faithful mode stands for a node of {have} (the largest --world-sizes)")  # fmt: skip
    return f"{what} needs {ranks} GPUs on nccl (one per rank), {where}"


def need_gpus(ranks: int, what: str) -> None:
    """Skip the calling test unless the run has a GPU for each of the ``ranks`` ranks of a job it starts itself
    (through the launcher: ``run_ranks(1, ...)`` whose rank forks ``ranks`` more). ``what`` names the job."""
    __tracebackhide__ = True
    reason = gpu_shortfall(ranks, what)
    if reason:
        pytest.skip(reason)
