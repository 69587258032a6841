"""The in-rank evaluator of pure functions: call accounting (or any module's) functions in one rank.

    from tests.oracles.accounting import EXAMPLES, assert_value, call, evaluate
    total, bubble = evaluate(call("training_memory_bytes", 7.5e9), call("pipeline_bubble_fraction", 4, 8))
    (plan,) = evaluate(call("pick_configs", ..., module="mesh"))

Like everything under test, the functions run in a rank (``run_ranks(1, ...)``): the parent sends
one batch of calls, gets each call's value back (or the exception it raised) and judges it.
``evaluate`` fails the test, naming the call, if one raised; ``assert_value`` compares a number
with the handout's; ``EXAMPLES`` is the hypothesis settings of the property tests.

Used by tests/test_accounting.py, tests/test_mesh_accounting.py,
tests/test_context_parallel_accounting.py and the hidden accounting tests.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, settings

from tests.harness import run_ranks

EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def accounting_rank(ctx, calls):
    """In a rank: evaluate ``[(module, function, args, kwargs), ...]`` of the implementation under
    test; ("ok", value) or (error type, message) for each call."""
    results = []
    for module, name, args, kwargs in calls:
        try:
            results.append(("ok", getattr(ctx.load(module), name)(*args, **kwargs)))
        except (TypeError, ValueError) as exc:
            results.append((type(exc).__name__, str(exc)))
    return results


def call(name: str, *args: Any, module: str = "accounting", **kwargs: Any) -> tuple:
    """One call for :func:`evaluate`: ``module.name(*args, **kwargs)`` (module: accounting)."""
    return (module, name, args, kwargs)


def evaluate(*calls: tuple) -> list:
    """Values of the calls, in order, computed in one rank; a call that raised fails the test with its message."""
    __tracebackhide__ = True
    values = []
    for (module, name, args, kwargs), (status, value) in zip(calls, run_ranks(1, accounting_rank, list(calls))[0]):
        assert status == "ok", f"{module}.{name}(*{args}, **{kwargs}) raised {status}: {value}"
        values.append(value)
    return values


def assert_value(got: Any, expected: float, what: str, rel: float = 1e-9) -> None:
    """``got`` is a number (not a bool) within ``rel`` (relative) or 1e-12 (absolute) of ``expected``."""
    __tracebackhide__ = True
    assert isinstance(got, (int, float)) and not isinstance(got, bool), f"{what}: expected a number, got {got!r}"
    assert math.isclose(got, expected, rel_tol=rel, abs_tol=1e-12), f"{what}: expected {expected!r}, got {got!r}"
