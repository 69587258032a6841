"""Bad input: a clear ValueError/TypeError naming the argument, on every rank, before any message.

Every part states its bad-input cases the same way: a table ``BAD_INPUT`` of ``BadInput`` in its
test module, one parametrized test that runs each case on every rank, and one judge here.

    BAD_INPUT = [  # in tests/test_collectives.py
        BadInput("reduce_scatter-dim0-not-divisible", lambda C, ctx: C.reduce_scatter(torch.ones(7)),
                 "ValueError", names="tensor", task="task1_4"),
    ]

    @pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
    def test_bad_input_raises_on_every_rank_before_communicating(world_size, case):
        outs = run_ranks(world_size, bad_input_rank, "collectives", case)   # ranks: make the call
        assert_rejected_before_communicating(outs, case)                     # parent: judge

The judge asks only what every stub docstring promises: the exception's type, the argument's name
in its message (as a word: ``op`` does not name itself inside ``stop``), on every rank, and no
communication before raising. The rest of the wording is the implementation's own.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from tests.harness.recorder import CommEvent, CommRecorder, format_events


@dataclass(frozen=True)
class BadInput:
    """One bad call and what it must raise.

    ``call(module, given)`` makes the bad call in a rank: ``module`` is the implementation's module
    (``ctx.load(part)``), ``given`` is ``arrange(module, ctx)`` when the case has an ``arrange`` step
    (e.g. DDP's first wrapping, whose own broadcast is not the bad call's: it runs before recording),
    else ``ctx``. Calls are lambdas, which do not pickle: a case travels to the ranks by name (the
    module that defines its call, and its id) and each rank finds it in that module's ``BAD_INPUT``.
    """

    id: str  # the test id: what is wrong, e.g. "broadcast-src-outside-the-group"
    call: Callable[[ModuleType, Any], object]
    exception: str  # "ValueError" or "TypeError", as the stub's docstring promises
    names: str  # the argument the message must name
    task: str  # the handout task's marker, e.g. "task1_4"
    arrange: Callable[[ModuleType, Any], Any] | None = None

    def __reduce__(self):
        return _case_named, (self.call.__module__, self.id)


def _case_named(module: str, case_id: str) -> BadInput:
    """The case ``case_id`` of ``module.BAD_INPUT`` (how a case is unpickled in a rank)."""
    return next(case for case in importlib.import_module(module).BAD_INPUT if case.id == case_id)


def bad_input_params(cases: list[BadInput]) -> list:
    """``pytest.param`` per case, with the case's id and its task's marker."""
    ids = [case.id for case in cases]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicated, f"bad-input ids must be unique (ranks find cases by id): {duplicated}"
    return [pytest.param(case, id=case.id, marks=getattr(pytest.mark, case.task)) for case in cases]


@dataclass(frozen=True)
class Rejection:
    """What one rank saw: the exception (type name, message) or what the call returned, and the
    communication made before it ended."""

    error: tuple[str, str] | None
    returned: str | None
    events: list[CommEvent]


def bad_input_rank(ctx, part: str, case: BadInput) -> Rejection:
    """Make the case's call on ``ctx.load(part)`` under the recorder. Other exceptions (e.g. a stub's
    NotImplementedError) fail the rank as usual."""
    module = ctx.load(part)
    given = case.arrange(module, ctx) if case.arrange else ctx  # its communication is not recorded
    with CommRecorder() as rec:
        try:
            result = case.call(module, given)
        except (ValueError, TypeError) as exc:
            return Rejection((type(exc).__name__, str(exc)), None, rec.events)
    shown = repr(result)
    return Rejection(None, shown if len(shown) <= 120 else shown[:117] + "...", rec.events)


def names_argument(message: str, name: str) -> bool:
    """``name`` stands in ``message`` as a word of its own (``tp=0`` names ``tp``; ``output`` does not)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def assert_rejected_before_communicating(outs: list[Rejection], case: BadInput) -> None:
    """Every rank raised ``case.exception`` naming ``case.names``, and communicated nothing first."""
    __tracebackhide__ = True
    for rank, seen in enumerate(outs):
        where = f"rank {rank}, {case.id}"
        assert seen.error is not None, (
            f"{where}: expected {case.exception}, but the call returned normally instead of raising "
            f"(it returned {seen.returned})"
        )
        kind, message = seen.error
        assert kind == case.exception, (
            f"{where}: expected {case.exception} naming {case.names!r}, got {kind}: {message}"
        )
        assert names_argument(message, case.names), (
            f"{where}: the {kind} should name the argument {case.names!r}; its message was {message!r}"
        )
        assert not seen.events, (
            f"{where}: communicated before raising (check the arguments on every rank before the first "
            f"message, so that no peer is left waiting):\n{format_events(seen.events)}"
        )
