"""The unit-time pipeline simulator: run every rank's schedule together and time each action.

    from tests.oracles.pipeline_sim import simulate, timeline
    makespan, stuck = simulate(per_rank_actions, chunks=2)          # tests: deadlock and bubble
    for rank, row in enumerate(timeline(per_rank_actions)): ...     # figures: (action, start, end)

A schedule is one list of actions per rank, run in that list's order. An action is ``(kind,
microbatch)``, ``(kind, microbatch, chunk)`` or any object with ``kind``, ``microbatch`` and
``chunk`` attributes (the ``Action`` of ``pipeline.py``); kind is "F", "B" or "W". Local chunk c of
rank r is global chunk g = c·p + r of the model (p ranks). Sends never block; an action waits only
for its input: F of (i, g) for F of (i, g - 1), B of (i, g) for B of (i, g + 1) (the last chunk's B
for its own F), W for its own B. An action starts when its rank is free and its input has arrived,
and lasts ``cost[kind]`` units (default F = 1, B = 2, W = 0: a whole backward is twice a forward).
Ranks whose next action can never run are *stuck*: the schedules wait on each other forever.

Used by tests/test_pipeline.py and tests/test_pipeline_schedules.py (no deadlock, idle time equals
the bubble formula, the accounting's bubble), and by the figure scripts that draw Part 5's
schedules as Gantt charts (scripts/figures/pipeline.py, scripts/figures/basics.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_COST = {"F": 1, "B": 2, "W": 0}


def action_key(action: Any) -> tuple[str, int, int]:
    """``(kind, microbatch, local chunk)`` of an action given as a 2- or 3-tuple or an ``Action``."""
    if isinstance(action, tuple) and len(action) in (2, 3) and isinstance(action[0], str):
        return (action[0], action[1], action[2] if len(action) == 3 else 0)
    return (action.kind, action.microbatch, getattr(action, "chunk", 0))


@dataclass(frozen=True)
class Run:
    """What :func:`run` found: per rank ``[(action, start, end), ...]`` for the actions that ran (in
    the rank's order) and the ranks left with actions that can never run."""

    timeline: list[list[tuple[Any, float, float]]]
    stuck: list[int]

    @property
    def makespan(self) -> float:
        """When the last action ends (0 for empty schedules)."""
        return max((row[-1][2] for row in self.timeline if row), default=0)


def run(stages: Sequence[Sequence[Any]], chunks: int = 1, cost: dict[str, float] | None = None) -> Run:
    """Execute every rank's actions in order (``chunks``: model chunks per rank, v) and time them."""
    cost = cost or DEFAULT_COST
    p = len(stages)
    last = p * chunks - 1
    done: dict[tuple[str, int, int], float] = {}  # (kind, microbatch, global chunk) -> end time
    pos, free = [0] * p, [0] * p
    rows: list[list[tuple[Any, float, float]]] = [[] for _ in range(p)]
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pos[r] < len(stages[r]):
                action = stages[r][pos[r]]
                kind, i, c = action_key(action)
                g = c * p + r
                dep = {
                    "F": ("F", i, g - 1) if g > 0 else None,
                    "B": ("B", i, g + 1) if g < last else ("F", i, g),
                    "W": ("B", i, g),
                }[kind]
                if dep is not None and dep not in done:
                    break  # waits for a message (or, for a W, for its own B)
                start = max(free[r], done.get(dep, 0))
                free[r] = done[(kind, i, g)] = start + cost[kind]
                rows[r].append((action, start, free[r]))
                pos[r], progress = pos[r] + 1, True
    return Run(rows, [r for r in range(p) if pos[r] < len(stages[r])])


def simulate(
    stages: Sequence[Sequence[Any]], chunks: int = 1, cost: dict[str, float] | None = None
) -> tuple[float, list[int]]:
    """``(makespan, stuck ranks)`` of the schedules run together; see the module docstring."""
    result = run(stages, chunks, cost)
    return result.makespan, result.stuck


def timeline(
    stages: Sequence[Sequence[Any]], chunks: int = 1, cost: dict[str, float] | None = None
) -> list[list[tuple[Any, float, float]]]:
    """For every rank, ``[(action, t_start, t_end), ...]`` in unit time, ready to draw as a Gantt
    chart; raises RuntimeError naming the stuck ranks if the schedules deadlock."""
    result = run(stages, chunks, cost)
    if result.stuck:
        raise RuntimeError(f"the schedule deadlocks: ranks {result.stuck} wait on each other forever")
    return result.timeline
