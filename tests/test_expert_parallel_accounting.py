"""Part 8, task 8.4: expert-parallel accounting (handouts/08-expert-parallel.md §8.4).

    pytest tests/test_expert_parallel_accounting.py    # accounting.py's expert-parallel section

Pure functions, run in one rank like Part 6's. The parent judges against hand-worked numbers and its
own recomputation of the handout's formulas; bad input must raise ValueError/TypeError naming the
argument.
"""

from __future__ import annotations

import math

import pytest

from tests.harness import run_ranks
from tests.harness.bad_input import BadInput, assert_rejected_before_communicating, bad_input_params, bad_input_rank


def accounting_rank(ctx, calls):
    """Evaluate ``[(function name, args), ...]`` in accounting: ("ok", value) or (error type, message)."""
    accounting = ctx.load("accounting")
    results = []
    for name, args in calls:
        try:
            results.append(("ok", getattr(accounting, name)(*args)))
        except (TypeError, ValueError) as exc:
            results.append((type(exc).__name__, str(exc)))
    return results


def _check(calls: list[tuple[str, tuple]], expected: list[float]) -> None:
    __tracebackhide__ = True
    for (name, args), want, (status, got) in zip(calls, expected, run_ranks(1, accounting_rank, calls)[0]):
        assert status == "ok", f"{name}{args} raised {status}: {got}"
        assert isinstance(got, (int, float)) and not isinstance(got, bool), f"{name}{args}: not a number: {got!r}"
        assert math.isclose(got, want, rel_tol=1e-9), f"{name}{args}: expected {want!r}, got {got!r}"


def _a2a(tokens, d, k, w, b=2):  # the handout's formula, written again
    return 4 * tokens * k * d * (w - 1) / w * b


def _experts(d, f, e, w, b=2, bias=True):
    return e // w * (2 * d * f + (f + d if bias else 0)) * b


A2A_CASES = [(4096, 4096, 2, 8, 2), (4096, 4096, 2, 1, 2), (1000, 512, 1, 4, 4), (7.5, 64, 8, 64, 1), (0, 8, 1, 2, 2)]
EXPERT_CASES = [(6144, 16384, 8, 8, 2, True), (6144, 16384, 8, 8, 2, False), (7168, 2048, 256, 64, 16, False),
                (12, 16, 8, 2, 4, True)]  # fmt: skip


@pytest.mark.task8_4
def test_all_to_all_bytes_are_four_exchanges_of_the_routed_rows():
    """4 * tokens * top_k * d_model * (W-1)/W * bytes: 234,881,024 for 4096 tokens, d 4096, top-2, W 8, bf16;
    nothing leaves a single rank."""
    calls = [("moe_all_to_all_bytes", args) for args in A2A_CASES]
    _check(calls, [_a2a(*args) for args in A2A_CASES])
    _check([("moe_all_to_all_bytes", (4096, 4096, 2, 8))], [234_881_024])  # bytes_per_element defaults to 2


@pytest.mark.task8_4
def test_expert_bytes_per_rank_count_whole_experts():
    """E/W whole MLP experts per rank: Mixtral 8x22B's expert (d 6144, d_ff 16384) is 402,698,240 bf16
    bytes with biases, 402,653,184 without; the router is not counted."""
    calls = [("expert_parameter_bytes_per_rank", args) for args in EXPERT_CASES]
    _check(calls, [_experts(*args) for args in EXPERT_CASES])
    _check([("expert_parameter_bytes_per_rank", (6144, 16384, 8, 8))], [402_698_240])


BAD_INPUT = [
    BadInput("a2a-negative-tokens", lambda A, ctx: A.moe_all_to_all_bytes(-1, 8, 1, 2), "ValueError",
             names="tokens", task="task8_4"),
    BadInput("a2a-float-top_k", lambda A, ctx: A.moe_all_to_all_bytes(8, 8, 1.5, 2), "TypeError",
             names="top_k", task="task8_4"),
    BadInput("a2a-zero-world_size", lambda A, ctx: A.moe_all_to_all_bytes(8, 8, 1, 0), "ValueError",
             names="world_size", task="task8_4"),
    BadInput("experts-not-divisible", lambda A, ctx: A.expert_parameter_bytes_per_rank(8, 16, 6, 4), "ValueError",
             names="num_experts", task="task8_4"),
    BadInput("experts-bias-not-bool", lambda A, ctx: A.expert_parameter_bytes_per_rank(8, 16, 8, 4, 2, 1),
             "TypeError", names="bias", task="task8_4"),
]  # fmt: skip


@pytest.mark.parametrize("case", bad_input_params(BAD_INPUT))
def test_bad_input_raises_naming_the_argument(case):
    """A wrong argument raises ValueError/TypeError naming it."""
    assert_rejected_before_communicating(run_ranks(1, bad_input_rank, "accounting", case), case)
