"""``run_ranks``: the one call a test makes to run a function on every rank."""

from __future__ import annotations

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
    pool = get_pool(world_size, CONFIG.backend)
    return pool.run(fn, args, kwargs, impl=resolve_impl(impl or CONFIG.impl), deadline=deadline or CONFIG.deadline)
