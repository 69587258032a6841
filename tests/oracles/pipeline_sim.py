"""The unit-time pipeline simulator: run every rank's schedule together and time each action.

    from tests.oracles.pipeline_sim import simulate, timeline
    makespan, stuck = simulate(per_rank_actions, chunks=2)          # tests: deadlock and bubble
    for rank, row in enumerate(timeline(per_rank_actions)): ...     # figures: (action, start, end)

A schedule is one list of actions per rank, run in that list's order. An action is ``(kind,
microbatch)``, ``(kind, microbatch, chunk)`` or any object with ``kind``, ``microbatch`` and
``chunk`` attributes (the ``Action`` of ``pipeline.py``); kind is "F", "B" or "W". Local chunk c of
rank r is global chunk g = c·p + r of the model (p ranks), or, with ``placement="v"`` (two chunks
per rank in a V), g = r for c = 0 and g = 2p - 1 - r for c = 1. Sends never block; an action waits
only for its input: F of (i, g) for F of (i, g - 1), B of (i, g) for B of (i, g + 1) (the last
chunk's B for its own F), W for its own B. An action starts when its rank is free and its input has
arrived, and lasts ``cost[kind]`` units (default F = 1, B = 2, W = 0: a whole backward is twice a
forward); a B with no W of its own microbatch and chunk on its rank is a whole backward and lasts
``cost["B"] + cost["W"]``. An "F" whose ``overlap`` attribute is true (DualPipeV's F&B) runs as one
unit with the action after it (a B): both start when both inputs are in and the rank is free, and
both end ``cost["F&B"]`` later (default: the two costs added, no overlap gain).
Ranks whose next action can never run are *stuck*: the schedules wait on each other forever.
``crossed_messages`` checks what tag-blind matching needs: between every ordered pair of ranks the
receiver posts its receives in the order the sender posts the messages.

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
    """``(kind, microbatch, local chunk)`` of an action given as a 2- to 4-tuple (the 4th: overlap) or an ``Action``."""
    if isinstance(action, tuple) and len(action) in (2, 3, 4) and isinstance(action[0], str):
        return (action[0], action[1], action[2] if len(action) >= 3 else 0)
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


def global_chunk(p: int, rank: int, chunk: int, placement: str = "loop") -> int:
    """The model chunk that local ``chunk`` of ``rank`` is: c·p + r, or in a V r / 2p - 1 - r."""
    if placement == "v":
        return rank if chunk == 0 else 2 * p - 1 - rank
    return chunk * p + rank


def _overlapped(action: Any) -> bool:
    if isinstance(action, tuple):
        return len(action) == 4 and bool(action[3])
    return bool(getattr(action, "overlap", False))


def _whole_backwards(row: Sequence[Any]) -> set[tuple[int, int]]:
    """(microbatch, chunk) of the Bs of ``row`` that no W follows: whole backwards."""
    keys = [action_key(a) for a in row]
    return {k[1:] for k in keys if k[0] == "B"} - {k[1:] for k in keys if k[0] == "W"}


def run(
    stages: Sequence[Sequence[Any]], chunks: int = 1, cost: dict[str, float] | None = None, placement: str = "loop"
) -> Run:
    """Execute every rank's actions in order (``chunks``: model chunks per rank, v; ``placement``:
    "loop" or "v") and time them."""
    cost = cost or DEFAULT_COST
    p = len(stages)
    last = p * chunks - 1
    whole = [_whole_backwards(row) for row in stages]
    done: dict[tuple[str, int, int], float] = {}  # (kind, microbatch, global chunk) -> end time
    pos, free = [0] * p, [0] * p
    rows: list[list[tuple[Any, float, float]]] = [[] for _ in range(p)]

    def needs(r: int, action: Any) -> tuple[tuple[str, int, int], tuple[str, int, int] | None, float]:
        """(the action's own key, the key it waits for, its duration)."""
        kind, i, c = action_key(action)
        g = global_chunk(p, r, c, placement)
        waits = {"F": ("F", i, g - 1) if g > 0 else None, "B": ("B", i, g + 1) if g < last else ("F", i, g),
                 "W": ("B", i, g)}[kind]  # fmt: skip
        return (kind, i, g), waits, cost[kind] + (cost.get("W", 0) if kind == "B" and (i, c) in whole[r] else 0)

    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pos[r] < len(stages[r]):
                unit = stages[r][pos[r] : pos[r] + (2 if _overlapped(stages[r][pos[r]]) else 1)]
                parts = [needs(r, a) for a in unit]
                if any(w is not None and w not in done for _, w, _ in parts):
                    break  # waits for a message (or, for a W, for its own B)
                start = max([free[r]] + [done[w] for _, w, _ in parts if w is not None])
                # An F&B pair is one unit: both end together.
                end = start + (cost.get("F&B", parts[0][2] + parts[1][2]) if len(unit) == 2 else parts[0][2])
                for action, (key, _, _) in zip(unit, parts):
                    done[key] = end
                    rows[r].append((action, start, end))
                free[r] = end
                pos[r], progress = pos[r] + len(unit), True
    return Run(rows, [r for r in range(p) if pos[r] < len(stages[r])])


def crossed_messages(stages: Sequence[Sequence[Any]], chunks: int = 1, placement: str = "loop") -> list[str]:
    """Where tag-blind matching breaks: for every ordered pair of ranks whose receiver posts its
    receives from the sender in another order than the sender posts the messages, one line naming
    the pair and the first message out of place. A rank posts one message per F (the activation,
    unless the next chunk is its own or there is none) and per B (the input gradient, likewise),
    and one receive per action whose input comes from another rank; [] when every pair agrees."""
    p = len(stages)
    last = p * chunks - 1
    rank_of = {global_chunk(p, r, c, placement): r for r in range(p) for c in range(chunks)}
    sent: dict[tuple[int, int], list] = {}
    received: dict[tuple[int, int], list] = {}
    for r, row in enumerate(stages):
        for kind, i, c in map(action_key, row):
            g = global_chunk(p, r, c, placement)
            to = {"F": g + 1 if g < last else None, "B": g - 1 if g > 0 else None}.get(kind)
            frm = {"F": g - 1 if g > 0 else None, "B": g + 1 if g < last else None}.get(kind)
            if to is not None and rank_of[to] != r:
                sent.setdefault((r, rank_of[to]), []).append((kind, i, g))
            if frm is not None and rank_of[frm] != r:
                message = ("F", i, frm) if kind == "F" else ("B", i, frm)
                received.setdefault((rank_of[frm], r), []).append(message)
    out = []
    for pair in sorted(set(sent) | set(received)):
        a, b = sent.get(pair, []), received.get(pair, [])
        if a != b:
            k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            out.append(f"rank {pair[0]} -> rank {pair[1]}: message {k} sent as {a[k:k + 1]}, received as {b[k:k + 1]}"
                       " (kind, microbatch, sending chunk)")  # fmt: skip
    return out


def simulate(
    stages: Sequence[Sequence[Any]], chunks: int = 1, cost: dict[str, float] | None = None, placement: str = "loop"
) -> tuple[float, list[int]]:
    """``(makespan, stuck ranks)`` of the schedules run together; see the module docstring."""
    result = run(stages, chunks, cost, placement)
    return result.makespan, result.stuck


def timeline(
    stages: Sequence[Sequence[Any]], chunks: int = 1, cost: dict[str, float] | None = None, placement: str = "loop"
) -> list[list[tuple[Any, float, float]]]:
    """For every rank, ``[(action, t_start, t_end), ...]`` in unit time, ready to draw as a Gantt
    chart; raises RuntimeError naming the stuck ranks if the schedules deadlock."""
    result = run(stages, chunks, cost, placement)
    if result.stuck:
        raise RuntimeError(f"the schedule deadlocks: ranks {result.stuck} wait on each other forever")
    return result.timeline
