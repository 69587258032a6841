"""Bad input: a clear ValueError/TypeError naming the argument, on every rank, before any message.

def bad_input_rank(ctx, case):                          # in each rank
    C = ctx.load("collectives")
    return rejection(lambda: C.reduce_scatter(torch.ones(7)))

outs = run_ranks(world_size, bad_input_rank, case)      # in the parent
assert_rejected_before_communicating(outs, case, "ValueError", "tensor")
"""

from __future__ import annotations

from collections.abc import Callable

from tests.harness.recorder import CommEvent, CommRecorder, format_events


def rejection(call: Callable[[], object]) -> tuple[tuple[str, str] | None, list[CommEvent]]:
    """Run ``call()`` under the recorder: ((exception type name, message) or None, calls made)."""
    with CommRecorder() as rec:
        try:
            call()
            error = None
        except (ValueError, TypeError) as exc:
            error = (type(exc).__name__, str(exc))
    return error, rec.events


def assert_rejected_before_communicating(outs: list, case: str, exc_type: str, must_name: str) -> None:
    """Every rank's ``rejection`` result shows ``exc_type`` naming ``must_name`` and no communication."""
    __tracebackhide__ = True
    for rank, (error, events) in enumerate(outs):
        assert error is not None, f"rank {rank}, {case}: expected {exc_type}, but the call returned normally"
        assert error[0] == exc_type, f"rank {rank}, {case}: expected {exc_type}, got {error[0]}: {error[1]}"
        assert must_name in error[1], f"rank {rank}, {case}: the message should name {must_name!r}: {error[1]!r}"
        assert not events, f"rank {rank}, {case}: communicated before raising:\n{format_events(events)}"
