"""Run-wide settings (filled in by tests/conftest.py from the command line) and ``run_ranks``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tests.harness.pool import get_pool

IMPL_ALIASES = {"student": "cs336_systems", "reference": "reference_solutions"}


def resolve_impl(name: str) -> str:
    """``student`` -> ``cs336_systems``, ``reference`` -> ``reference_solutions``, else the name."""
    return IMPL_ALIASES.get(name, name)


@dataclass
class Config:
    impl: str = resolve_impl(os.environ.get("CS336_IMPL", "student"))
    backend: str = os.environ.get("CS336_BACKEND", "gloo")
    deadline: float = float(os.environ.get("CS336_DEADLINE", "30"))


CONFIG = Config()


def run_ranks(world_size: int, fn, *args, deadline: float | None = None, impl: str | None = None, **kwargs):
    """Run ``fn(ctx, *args, **kwargs)`` on ``world_size`` ranks and return the list of results.

    ``fn`` must be a module-level function; tensors in the results come back on the CPU. If any
    rank raises, dies or misses the deadline, raises ``RankFailure`` describing every rank.
    """
    __tracebackhide__ = True
    pool = get_pool(world_size, CONFIG.backend)
    return pool.run(fn, args, kwargs, impl=resolve_impl(impl or CONFIG.impl), deadline=deadline or CONFIG.deadline)
